"""Probes find planted head functions: a tiny BERT whose weights make layer 0 head 0 attend to the
next token and head 1 to identical tokens."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conftest import tiny_model
from headcut.batching import Encoded
from headcut_grader.data import Pairs
from headcut_grader.errors import UserError
from headcut.evaluate.scan import telling_example
from headcut.evaluate.probes import (UNMEASURED, ProbeInputs, best_head, best_union, example_attention, probe_heads,
                                     segmented_inputs, unmeasured)

HIDDEN, HEAD = 64, 16
CLS, SEP = 2, 3


def planted_model():
    """Embeddings [p, -p, w, -w]: zero mean and constant norm, so LayerNorm only rescales. p_t is a
    sinusoidal position code (a shift by one position is a rotation R, i.e. linear); w_v a random unit code."""
    model = tiny_model("bert", hidden_size=HIDDEN, num_attention_heads=4, intermediate_size=37, seed=0,
                       max_position_embeddings=64)
    freqs = torch.tensor([0.15, 0.35, 0.55, 0.8, 1.1, 1.5, 2.0, 2.6])
    t = torch.arange(64, dtype=torch.float32)[:, None]
    p = torch.cat([torch.cos(freqs * t), torch.sin(freqs * t)], 1)  # (positions, 16)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(99, 16, generator=g)
    w = w / w.norm(dim=1, keepdim=True) * math.sqrt(8)  # same norm as p: 8 = sum cos^2 + sin^2
    emb = model.bert.embeddings
    with torch.no_grad():
        emb.position_embeddings.weight.zero_()
        emb.position_embeddings.weight[:, :16] = p
        emb.position_embeddings.weight[:, 16:32] = -p
        emb.word_embeddings.weight.zero_()
        emb.word_embeddings.weight[:, 32:48] = w
        emb.word_embeddings.weight[:, 48:] = -w
        emb.token_type_embeddings.weight.zero_()
        emb.LayerNorm.weight.fill_(1.0)
        emb.LayerNorm.bias.zero_()
        att = model.bert.encoder.layer[0].attention.self
        for lin in (att.query, att.key):
            lin.weight.zero_()
            lin.bias.zero_()
        c, s = torch.cos(freqs), torch.sin(freqs)
        rot = torch.zeros(16, 16)  # p_{t+1} = rot @ p_t
        rot[:8, :8], rot[:8, 8:] = torch.diag(c), -torch.diag(s)
        rot[8:, :8], rot[8:, 8:] = torch.diag(s), torch.diag(c)
        att.query.weight[:16, :16] = 40 * rot  # head 0: query = R p_t, key = p_s -> peaks at s = t + 1
        att.key.weight[:16, :16] = torch.eye(16)
        att.query.weight[16:32, 32:48] = 40 * torch.eye(16)  # head 1: query = w_t, key = w_s -> twins
        att.key.weight[16:32, 32:48] = torch.eye(16)
    return model


# best_head of boundary_f1 on planted_inputs: the next-token head L0H0 links every within-word pair (recall 1) and
# every neighbour, 24 of the 72 candidate links (precision 1/3): F1 2*24 / (2*24 + 48) = 0.5, no other head near it
PLANTED_BOUNDARY = (0, 0, pytest.approx(0.5, abs=1e-6))


def planted_inputs(n: int = 12) -> ProbeInputs:
    g = np.random.default_rng(0)
    ids, continues = [], []
    for _ in range(n):
        query = [int(x) for x in g.choice(np.arange(10, 50), 3, replace=False)]  # disjoint ranges: one twin only
        title = [int(x) for x in g.choice(np.arange(50, 99), 5, replace=False)]
        title[2] = query[1]  # one shared term per pair
        row = [CLS] + query + [SEP] + title + [SEP]
        ids.append(row)
        continues.append([i in (1, 6) for i in range(len(row))])  # two two-piece words per pair
    enc = Encoded(ids, [[0] * len(r) for r in ids], 0)
    return ProbeInputs(enc, {0, CLS, SEP}, SEP, continues)


def test_probes_find_the_planted_heads():
    model = planted_model()
    out = probe_heads(model, planted_inputs(), batch_size=5)
    nxt, term = out["next"][0], out["term_match"][0]
    assert nxt[0] > 0.95 and np.argmax(out["next"].flatten()) == 0
    assert term[1] > 0.3 and np.argmax(out["term_match"].flatten()) == 1
    assert term[1] > 5 * np.delete(out["term_match"].flatten(), 1).max()
    assert out["previous"][0, 0] < 0.05 and out["noop"].shape == (2, 4)
    # the next-token head links every neighbour: perfect recall, precision 2 of the 6 candidates per pair
    assert np.isclose(out["boundary_f1"][0, 0], 2 * 24 / (2 * 24 + (12 * 6 - 24) + 0), atol=1e-6)
    assert out["boundary_union"]["f1"] >= out["boundary_f1"].max() - 1e-12
    assert out["content_tokens"] == 12 * 8 and out["twin_tokens"] == 12 * 2


def test_titles_of_one_token_each_are_probed_without_a_boundary_score():
    """Was: `headcut probe` and `headcut scan` of pairs whose texts are one token each (query 'q', title 't') failed
    with numpy's "cannot reshape array of size 0", a traceback: such texts have no neighbouring tokens to link."""
    ids = [[CLS, 11, SEP, 60, SEP], [CLS, 13, SEP, 61, SEP]]
    continues = [[False] * len(row) for row in ids]
    inputs = ProbeInputs(Encoded(ids, [[0] * len(row) for row in ids], 0), {0, CLS, SEP}, SEP, continues)
    out = probe_heads(planted_model(), inputs, batch_size=4)
    assert "boundary_f1" not in out and out["next"].shape == (2, 4)


def test_a_probe_with_nothing_to_measure_has_no_best_head():
    """Pairs where no title repeats a query token, and no word spans two tokens: term_match was 0 for every head
    (a mean over no twin) and boundary_f1 0 for every head (no link to find), so `headcut probe` printed
    'term_match best L0H0 0.000' and scan's experiment 5 masked the first k heads as the "strongest". Both are now
    NaN for every head, and best_head says there is none; a probe that measured keeps its best head."""
    ids = [[CLS, 11, 12, SEP, 60, 61, SEP], [CLS, 13, SEP, 62, 63, 64, SEP]]
    continues = [[False] * len(row) for row in ids]
    inputs = ProbeInputs(Encoded(ids, [[0] * len(row) for row in ids], 0), {0, CLS, SEP}, SEP, continues)
    out = probe_heads(planted_model(), inputs, batch_size=4)
    assert out["twin_tokens"] == 0 and np.isnan(out["term_match"]).all()
    assert out["boundary_links"] == 0 and out["boundary_candidates"] == 4 and np.isnan(out["boundary_f1"]).all()
    assert "boundary_union" not in out
    assert best_head(out, "term_match") is None and best_head(out, "boundary_f1") is None
    assert best_head(out, "next") == (0, 0, pytest.approx(float(out["next"][0, 0])))
    assert unmeasured("term_match") == UNMEASURED["term_match"] and unmeasured("noop") == "no head measured"
    shown = [why.split()[0] for *_, why in telling_example(planted_model(), inputs, out)["heads"]]
    assert "next" in shown and not {"term_match", "boundary_f1"} & set(shown)  # drawn as -inf at L0H0
    planted = probe_heads(planted_model(), planted_inputs(), batch_size=5)
    assert best_head(planted, "term_match")[:2] == (0, 1) and best_head(planted, "boundary_f1") == PLANTED_BOUNDARY


def even_attention_model():
    """The planted model with every query and key weight zero: each head attends evenly to every token."""
    model = planted_model()
    with torch.no_grad():
        for layer in model.bert.encoder.layer:
            for lin in (layer.attention.self.query, layer.attention.self.key):
                lin.weight.zero_()
                lin.bias.zero_()
    return model


def test_no_head_linking_a_within_word_pair_leaves_the_boundary_union_unmeasured():
    """Every query and key weight zero: each head attends evenly, so its strongest attention is the first token and
    no head links a token to the next one of its word (F1 0 for each, a measurement). The union of none was
    {'heads': [], 'f1': 0.0}, which `headcut probe` printed as 'boundary union  F1 0.000' and the scan report as a
    union of no heads reaching F1 0.000; now its F1 is NaN and best_union says there is none (UNMEASURED's reason)."""
    model = even_attention_model()
    out = probe_heads(model, planted_inputs(), batch_size=5)
    assert out["boundary_links"] == 24 and (out["boundary_f1"] == 0).all()
    assert out["boundary_union"]["heads"] == [] and math.isnan(out["boundary_union"]["f1"])
    assert best_union(out) is None and unmeasured("boundary_union") == UNMEASURED["boundary_union"]
    planted = probe_heads(planted_model(), planted_inputs(), batch_size=5)
    # the greedy union starts at the best head and takes another only where it raises F1: at least that head's 0.5
    assert best_union(planted)["heads"][0] == [0, 0] and best_union(planted)["f1"] >= 0.5 - 1e-6


def test_a_probe_whose_heads_all_score_alike_has_no_best_head():
    """Every query and key weight zero: each head's boundary F1 is a measured 0, and best_head named the first of the
    equal scores, so `headcut probe` printed 'boundary_f1  best L0H0  0.000' and the attention figure drew L0H0 as
    the telling boundary head. A best head scores above another; where every head scores alike there is none, and
    unmeasured says so with the score; a probe whose heads differ keeps its best head."""
    model = even_attention_model()
    out = probe_heads(model, planted_inputs(), batch_size=5)
    assert (out["boundary_f1"] == 0).all() and best_head(out, "boundary_f1") is None
    assert unmeasured("boundary_f1", out) == "every head scores 0.000, so no head is better than another"
    assert best_head({"p": np.full((2, 4), 0.25)}, "p") is None
    assert best_head({"p": np.array([[0.5]])}, "p") == (0, 0, 0.5)
    assert best_head({"p": np.array([[0.25, np.nan, 0.5]])}, "p") == (0, 2, 0.5)
    assert unmeasured("term_match", {"term_match": np.full((2, 4), np.nan)}) == UNMEASURED["term_match"]
    shown = [why.split()[0] for *_, why in telling_example(model, planted_inputs(), out)["heads"]]
    assert "boundary_f1" not in shown
    planted = probe_heads(planted_model(), planted_inputs(), batch_size=5)
    assert best_head(planted, "boundary_f1") == PLANTED_BOUNDARY


def test_heads_that_share_the_top_score_have_no_best_head_and_are_named():
    """Two heads tied at the top: best_head named the first of them silently, as it named the first of heads that
    all score alike before those were n/a. A best head scores above every other; where some share the top score
    there is none, and unmeasured names them with the score (n/a in `headcut probe` and the scan report, no head
    drawn in the attention figure), as it says every head scoring alike."""
    tied = {"p": np.array([[0.5, 0.25, np.nan], [0.1, 0.5, 0.5]])}
    assert best_head(tied, "p") is None
    assert unmeasured("p", tied) == ("L0H0, L1H1 and L1H2 share the top score 0.500, so no head is better than the "
                                     "others")
    pair = {"p": np.array([[0.5, 0.25], [0.5, 0.1]])}
    assert best_head(pair, "p") is None
    assert unmeasured("p", pair) == "L0H0 and L1H0 share the top score 0.500, so no head is better than the others"
    assert best_head({"p": np.array([[0.5, 0.25], [0.25, 0.1]])}, "p") == (0, 0, 0.5)  # a tie below the top: a best
    assert unmeasured("p", {"p": np.full((2, 2), 0.5)}) == "every head scores 0.500, so no head is better than another"


def test_example_attention_is_a_distribution_per_row():
    model = planted_model()
    maps, tokens = example_attention(model, planted_inputs(), 0)
    assert maps[0].shape == (4, 11, 11) and len(tokens) == 11
    assert torch.allclose(maps[0].sum(-1), torch.ones(4, 11), atol=1e-5)
    assert maps[0][0, 1].argmax() == 2  # token 1 looks at token 2


def chinese_inputs():
    """Real MiniLM WordPiece on Chinese titles (one piece per CJK character) with a given segmentation."""
    from conftest import need_minilm

    need_minilm()
    from transformers import AutoTokenizer

    from headcut.models import resolve_source

    tok = AutoTokenizer.from_pretrained(resolve_source("minilm-l6"))
    pairs = Pairs(["怎么起诉", "华为手机"], ["如何在网上立案", "华为P40手机"], None)
    return tok, segmented_inputs(tok, pairs, ["如何 在 网上 立案", "华为 P40 手机"], max_length=32)


def test_segmentation_column_sets_the_boundary_reference():
    tok, inputs = chinese_inputs()
    first, second = inputs.tokens
    # one piece per character; MiniLM's vocabulary lacks most CJK characters, so offsets (not piece text) align them
    assert first[first.index("[SEP]") + 1:-1] == ["[UNK]"] * 4 + ["上", "立", "[UNK]"]
    start = first.index("[SEP]") + 1
    assert inputs.candidates[0][:start] == [False] * start  # the query has no reference
    assert inputs.continues[0][start:start + 7] == [True, False, False, True, False, True, False]
    assert inputs.candidates[0][start:start + 7] == [True] * 6 + [False]
    start = second.index("[SEP]") + 1
    assert second[start:-1] == ["[UNK]", "[UNK]", "p", "##40", "手", "[UNK]"]
    assert inputs.continues[1][start:start + 6] == [True, False, True, False, True, False]


def test_boundary_f1_is_scored_against_the_segmentation():
    """The planted next-token head links every title neighbour: 6 links per first title, 3 of them within
    a word -> precision 1/2, recall 1, F1 2/3; by the tokenizer's `##` marks (none) it would score 0."""
    tok, inputs = chinese_inputs()
    small = {i: 10 + k for k, i in enumerate(sorted({i for r in inputs.encoded.input_ids for i in r}))}
    small[tok.cls_token_id], small[tok.sep_token_id] = CLS, SEP  # the planted model's vocabulary is 99 ids
    ids = [[small[i] for i in row] for row in inputs.encoded.input_ids]
    planted = ProbeInputs(Encoded(ids[:1], inputs.encoded.token_type_ids[:1], 0), {0, CLS, SEP}, SEP,
                          inputs.continues[:1], candidates=inputs.candidates[:1])
    out = probe_heads(planted_model(), planted, batch_size=4)
    assert out["next"][0, 0] > 0.95
    assert out["boundary_candidates"] == 6 and out["boundary_links"] == 3
    assert np.isclose(out["boundary_f1"][0, 0], 2 / 3, atol=1e-9)
    by_pieces = ProbeInputs(planted.encoded, {0, CLS, SEP}, SEP, [[False] * len(ids[0])])
    assert np.isnan(probe_heads(planted_model(), by_pieces)["boundary_f1"]).all()  # no `##` link: none to find
    with pytest.raises(UserError, match="do not spell the title"):
        segmented_inputs(tok, Pairs(["q"], ["如何在网上"], None), ["如何 在线"])


@pytest.mark.parametrize("title, words, said", [
    ("cordless drill", "cordless\u200b drill",
     r"the --seg-col words 'cordless\u200b drill' do not spell the title 'cordless drill'"),
    ("cordless\u200bdrill", "cordless drill",
     r"the --seg-col words 'cordless drill' do not spell the title 'cordless\u200bdrill'"),
    ("drill", "drill\x00", r"the --seg-col words 'drill\x00' are longer than the title 'drill'"),
])
def test_seg_col_words_and_titles_are_quoted_with_their_hidden_characters(title, words, said):
    """Was: quoted as they stand, so a zero-width space or NUL did not show and the words looked like the title
    ('cordless drill' do not spell the title 'cordless drill')."""
    from headcut.evaluate.probes import _word_of_char

    with pytest.raises(UserError) as caught:
        _word_of_char(title, words.split(), "p.tsv, line 2", "--seg-col")
    assert str(caught.value).startswith(f"p.tsv, line 2: {said}")


def test_the_example_figure_of_long_pairs_shows_their_first_tokens_at_a_bounded_size():
    """Was: where no pair had 24 tokens or fewer, the figure drew a whole long pair, its size growing with the tokens
    squared: `headcut probe` (and `scan`) of 512-token pairs drew 36,925 x 18,462 pixels, 5.4 GB and 2 minutes."""
    from headcut.evaluate import figures
    from headcut.evaluate.scan import telling_example

    g = np.random.default_rng(0)
    ids = [[CLS, 10, 11, 12, SEP] + [int(x) for x in g.integers(50, 99, 54)] + [SEP] for _ in range(6)]
    inputs = ProbeInputs(Encoded(ids, [[0] * len(r) for r in ids], 0), {0, CLS, SEP}, SEP, None)
    model = planted_model()
    example = telling_example(model, inputs, probe_heads(model, inputs, batch_size=4))
    assert example["length"] == 60 and len(example["tokens"]) == 24 and example["heads"]
    assert all(m is None or m.shape == (4, 24, 24) for m in example["maps"])
    fig = figures.attention_grid(example["maps"], example["tokens"], example["heads"], length=example["length"])
    assert fig.get_size_inches()[0] <= 4 * (2.0 + 0.16 * 24) + 1e-9
    assert fig.get_suptitle() == "the first 24 of the pair's 60 tokens"


def varied_inputs(n: int = 20) -> ProbeInputs:
    """Pairs of 7 to 29 tokens with random within-word links, repeated terms and padding in every batch."""
    g = np.random.default_rng(3)
    ids = [[CLS] + [int(x) for x in g.integers(10, 60, g.integers(2, 8))] + [SEP]
           + [int(x) for x in g.integers(10, 99, g.integers(3, 20))] + [SEP] for _ in range(n)]
    continues = [[bool(x) for x in g.random(len(row)) < 0.3] for row in ids]
    return ProbeInputs(Encoded(ids, [[0] * len(r) for r in ids], 0), {0, CLS, SEP}, SEP, continues)


def held_maps(monkeypatch, module) -> list[int]:
    """Record how many attention probabilities each pass of `module` holds at once."""
    from headcut.evaluate.attention import attention_weights

    held = []

    def recording(model, batch):
        maps, logits = attention_weights(model, batch)
        held.append(sum(a.numel() for a in maps if a is not None))
        return maps, logits

    monkeypatch.setattr(module, "attention_weights", recording)
    return held


def assert_same_results(split, whole):
    if isinstance(whole, dict):
        assert split.keys() == whole.keys()
        for key in whole:
            assert_same_results(split[key], whole[key])
    elif isinstance(whole, np.ndarray) and whole.dtype.kind == "f":
        np.testing.assert_allclose(split, whole, rtol=1e-6, atol=1e-9)  # sums over pieces: rounding only
    else:
        assert np.array_equal(split, whole)


@pytest.mark.parametrize("pass_name", ["probes", "entropy"])
@pytest.mark.parametrize("pairs_per_piece", [3, 0])
def test_attention_passes_hold_bounded_maps_whatever_the_batch_size(monkeypatch, pass_name, pairs_per_piece):
    """Was: probe (scan's probes) and the entropy criterion kept every layer's maps of a whole --batch-size batch:
    MiniLM at --max-length 512 --batch-size 1024 needs 6 x 1024 x 12 x 512^2 floats = 77 GB. Now a batch is run in
    pieces holding at most MAX_HELD_SCORES (a pair over it alone), and the scores equal the whole batch's."""
    from headcut.evaluate import attention, criteria, probes

    model, inputs = tiny_model("bert", seed=2), varied_inputs()
    module, run = {
        "probes": (probes, lambda: probe_heads(model, inputs, batch_size=20)),
        "entropy": (criteria, lambda: criteria.entropy_scores(model, inputs.encoded, batch_size=20)),
    }[pass_name]
    held = held_maps(monkeypatch, module)
    whole = run()
    longest, heads = int(inputs.encoded.lengths().max()), 2 * 4
    assert held == [20 * heads * longest ** 2]  # the bound is far above this: one pass, as before
    bound = pairs_per_piece * heads * longest ** 2
    monkeypatch.setattr(attention, "MAX_HELD_SCORES", bound)
    held.clear()
    assert_same_results(run(), whole)
    assert max(held) <= max(bound, heads * longest ** 2)
    assert len(held) == (7 if pairs_per_piece == 3 else 20)


def maps_alive_at_each_pass(monkeypatch, module) -> list[int]:
    """Record, as each pass of `module` starts, how many attention maps of earlier passes are still alive."""
    import weakref

    from headcut.evaluate.attention import attention_weights

    earlier, alive = [], []

    def recording(model, batch):
        alive.append(sum(ref() is not None for ref in earlier))
        maps, logits = attention_weights(model, batch)
        earlier.extend(weakref.ref(a) for a in maps if a is not None)
        return maps, logits

    monkeypatch.setattr(module, "attention_weights", recording)
    return alive


@pytest.mark.parametrize("pass_name", ["probes", "entropy"])
def test_attention_passes_free_each_pieces_maps_before_the_next_piece_runs(monkeypatch, pass_name):
    """Was: probe_heads and entropy_scores kept the last piece's maps (bound to a loop variable) while the next
    piece's forward built its own, so `headcut probe` peaked at two pieces' maps once a scan had two full pieces
    (MiniLM-L12, 256 tokens: 1,024 MiB for 16 pairs, 1,249 for 32). Now what a pass keeps between pieces is its
    per-head sums and link table, never a map, so its peak is one piece's whatever the number of pairs."""
    from headcut.evaluate import attention, criteria, probes

    model, inputs = tiny_model("bert", seed=2), varied_inputs()
    monkeypatch.setattr(attention, "MAX_HELD_SCORES", 3 * 2 * 4 * int(inputs.encoded.lengths().max()) ** 2)
    module, run = {
        "probes": (probes, lambda: probe_heads(model, inputs, batch_size=20)),
        "entropy": (criteria, lambda: criteria.entropy_scores(model, inputs.encoded, batch_size=20)),
    }[pass_name]
    alive = maps_alive_at_each_pass(monkeypatch, module)
    run()
    assert len(alive) == 7 and alive == [0] * 7
