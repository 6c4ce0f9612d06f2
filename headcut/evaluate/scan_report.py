"""Writing a scan: importance.json (+ the tables), importance.csv, PNG figures, report.md and a
self-contained report.html (figures embedded as base64), into a folder the caller made (atomic_dir)."""
from __future__ import annotations

import base64
import csv
import html
import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from headcut.evaluate import figures
from headcut.evaluate.importance import write_scores
from headcut.evaluate.probes import PROBES, best_head, best_union, unmeasured
from headcut_grader.files import write_text


def jsonable(obj):
    """Arrays/tensors to lists, non-finite numbers to None (JSON has no NaN/inf)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        return jsonable(obj.tolist())
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _fmt(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "–"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _with_ci(row: dict, key: str, digits: int = 3) -> str:
    ci = row.get(f"{key}_ci")
    band = f" [{_fmt(ci[0], digits)}, {_fmt(ci[1], digits)}]" if ci else ""
    return f"{_fmt(row[key], digits)}{band}"


EFFECT_HEADER = ["accuracy change % [95% CI]", "loss change", "Spearman change", "flip rate"]


def _effect_cells(row: dict) -> list[str]:
    return [_with_ci(row, "relative_accuracy_pct", 2), _with_ci(row, "loss_delta", 4),
            _with_ci(row, "spearman_delta", 3), _with_ci(row, "flip_rate", 3)]


def report_blocks(result: dict, *, model_info: dict, data_info: dict, images: dict[str, str]) -> list[tuple]:
    """The report as blocks: ("h", text), ("p", text), ("table", header, rows), ("img", file, caption)."""
    b: list[tuple] = [("h", "Head importance scan")]
    b.append(("p", ("Model ", Code(model_info.get("path")), f" (weights {model_info.get('weights_hash')}), data ",
                    Code(data_info.get("source")), f" ({data_info.get('samples')} pairs, fingerprint "
                                                   f"{data_info.get('fingerprint')}, seed {data_info.get('seed')}).")))
    if "baseline" in result:
        base = result["baseline"]
        names = ("accuracy", "macro_f1", "spearman", "loss") if "accuracy" in base else (
            "spearman", "pearson", "ndcg@10", "mrr", "pair_accuracy", "loss")
        b.append(("p", "Unmasked baseline: " + ", ".join(f"{k} {_fmt(base[k], 4)}" for k in names)))
    b.append(("h2", "Most and least important heads"))
    b.append(("table", ["method", "top 5", "bottom 5"],
              [[m, " ".join(r["top"]), " ".join(r["bottom"])] for m, r in result["ranking"].items()]))
    corr = result["correlations"]
    if len(corr) > 1:
        b.append(("p", "Rank correlation (Spearman) between methods, over the heads:"))
        b.append(("table", ["", *corr], [[a, *(_fmt(corr[a][c], 2) for c in corr)] for a in corr]))
        overlap = result.get("top10_overlap")
        if overlap:
            b.append(("p", "Share of the 10 most important heads two methods have in common:"))
            b.append(("table", ["", *overlap], [[a, *(_fmt(overlap[a][c], 1) for c in overlap)] for a in overlap]))
    b.append(("img", images.get("importance"), "Scores per method (layers x heads)."))
    table = result.get("ablation_table")
    if table:
        b.append(("h2", "Masking one head (exact ablation)"))
        b.append(("p", "Ten heads whose masking raises the loss most; the CIs resample pairs."))
        top = sorted(table, key=lambda r: -r["loss_delta"])[:10]
        b.append(("table", ["head", *EFFECT_HEADER], [[f"L{r['layer']}H{r['head']}", *_effect_cells(r)] for r in top]))
        b.append(("img", images.get("heads"), "Experiment 4: one head masked at a time."))
    exps = result.get("experiments", {})
    if "random" in exps:
        b.append(("h2", "Experiment 1: random masking"))
        b.append(("table", ["heads masked", *EFFECT_HEADER],
                  [[f"{r['heads_masked']} ({100 * r['ratio']:.0f}%)", *_effect_cells(r)] for r in exps["random"]]))
        b.append(("img", images.get("random"), f"Random masking, {exps['draws']} draws per ratio."))
    if "halves" in exps:
        b.append(("h2", "Experiment 2: lower vs upper half of the layers"))
        rows = [[name, f"{r['heads_masked']} ({100 * r['ratio']:.0f}%)", *_effect_cells(r)]
                for name, curve in exps["halves"].items() for r in curve]
        b.append(("table", ["half", "heads masked", *EFFECT_HEADER], rows))
        b.append(("img", images.get("halves"), "Heads drawn only from the lower or only from the upper layers."))
    if "layers" in exps:
        b.append(("h2", "Experiment 3: one whole layer masked"))
        b.append(("table", ["layer", *EFFECT_HEADER], [[str(r["layer"]), *_effect_cells(r)] for r in exps["layers"]]))
        b.append(("img", images.get("layers"), "Each layer's heads masked together."))
    if "term" in exps:
        b.append(("h2", "Experiment 5: term-matching heads"))
        b.append(("table", ["masked", "heads", *EFFECT_HEADER],
                  [[r["condition"], str(r["heads_masked"]), *_effect_cells(r)] for r in exps["term"]]))
        strongest = exps["term"][0].get("heads", [])
        b.append(("p", "Strongest term-matching heads: " + " ".join(f"L{l}H{h}" for l, h in strongest)))
        b.append(("img", images.get("term"), "Term-matching heads vs random heads vs the lower half."))
    probes = result.get("probes")
    if probes:
        b.append(("h2", "Head probes"))
        rows = []
        for name in PROBES:
            if name in probes:
                best = best_head(probes, name)
                rows.append([name, "n/a", unmeasured(name, probes)] if best is None else
                            [name, f"L{best[0]}H{best[1]}", _fmt(best[2])])
        b.append(("table", ["probe", "best head", "score"], rows))
        union, links = best_union(probes), (f"{probes.get('boundary_links')} within-word links among "
                                            f"{probes.get('boundary_candidates')} neighbouring token pairs")
        if union:
            b.append(("p", f"Word-boundary links: best union of heads "
                           f"{' '.join(f'L{l}H{h}' for l, h in union['heads'])} reaches F1 {_fmt(union['f1'])} "
                           f"({links})."))
        elif "boundary_union" in probes:
            b.append(("p", f"Word-boundary links: best union of heads n/a: {unmeasured('boundary_union')} "
                           f"({links})."))
        b.append(("img", images.get("probes"), "Probe scores per head."))
        b.append(("img", images.get("attention"), "Attention maps of the most telling heads on one pair."))
    return [x for x in b if not (x[0] == "img" and not x[1])]


def markdown_text(text, *, cell: bool = False) -> str:
    """`text` (a path, a name from a recipe, an error's words) as markdown shows it as written: a < would open HTML
    (a folder '<script>' ran as a tag in a renderer), a line break would start a new block (a heading, a table row),
    and in a table `cell` a | would start a new cell; each is escaped (render_html escapes for HTML)."""
    text = str(text).replace("<", "\\<").replace("\r", "\\r").replace("\n", "\\n")
    return text.replace("|", "\\|") if cell else text


@dataclass(frozen=True)
class Code:
    """A paragraph's part shown as code (a path, a data source): in markdown a code span, in HTML between backticks."""
    text: object


def code_span(text) -> str:
    """`text` as a markdown code span that shows it as written: backslash escapes show literally in a code span, so
    none is used; its fence is one backtick longer than any run of them in it (CommonMark), padded by a space that
    markdown strips where it starts or ends with a backtick or a space; a line break is shown as \\n."""
    text = str(text).replace("\r", "\\r").replace("\n", "\\n")
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text[:1] == "`" or text[-1:] == "`" or text[:1] == text[-1:] == " " and text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _parts(text) -> tuple:
    """A paragraph's text as parts: a str, or the tuple of str and Code it was built as."""
    return (text,) if isinstance(text, str) else tuple(text)


def _plain(text) -> str:
    return "".join(f"`{p.text}`" if isinstance(p, Code) else str(p) for p in _parts(text))


def render_markdown(blocks) -> str:
    out = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            out.append(f"# {markdown_text(block[1])}\n")
        elif kind == "h2":
            out.append(f"## {markdown_text(block[1])}\n")
        elif kind == "p":
            out.append("".join(code_span(p.text) if isinstance(p, Code) else markdown_text(p) for p in _parts(block[1]))
                       + "\n")
        elif kind == "table":
            header, rows = block[1], block[2]
            out.append("| " + " | ".join(markdown_text(h, cell=True) for h in header) + " |\n|" + "---|" * len(header))
            out.extend("| " + " | ".join(markdown_text(c, cell=True) for c in r) + " |" for r in rows)
            out.append("")
        elif kind == "img":
            out.append(f"![{block[2]}]({block[1]})\n")
    return "\n".join(out) + "\n"


def render_html(blocks, folder: Path, *, title: str = "headcut scan") -> str:
    """A single page: every figure embedded as a data URI, so the file can be mailed on its own."""
    body = []
    for block in blocks:
        kind = block[0]
        if kind in ("h", "h2"):
            tag = "h1" if kind == "h" else "h2"
            body.append(f"<{tag}>{html.escape(block[1])}</{tag}>")
        elif kind == "p":
            body.append(f"<p>{html.escape(_plain(block[1]))}</p>")
        elif kind == "table":
            head = "".join(f"<th>{html.escape(h)}</th>" for h in block[1])
            rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in block[2])
            body.append(f"<table><tr>{head}</tr>{rows}</table>")
        elif kind == "img":
            data = base64.b64encode((folder / block[1]).read_bytes()).decode()
            body.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(block[2])}">'
                        f"<figcaption>{html.escape(block[2])}</figcaption></figure>")
    style = ("body{font-family:sans-serif;max-width:1300px;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}"
             "img{max-width:100%}figcaption{color:#555;font-size:13px}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def _save(fig, path: Path) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    path.write_bytes(buf.getvalue())
    return path.name


def write_figures(folder: Path, result: dict, shape: tuple[int, int]) -> dict[str, str]:
    images = {"importance": _save(figures.importance_heatmaps(result["scores"]), folder / "importance.png")}
    if result.get("ablation_table"):
        images["heads"] = _save(figures.head_effect_heatmaps(result["ablation_table"], shape), folder / "heads.png")
    exps = result.get("experiments", {})
    if "random" in exps:
        images["random"] = _save(figures.effect_curves({"random": exps["random"]},
                                                       title="Experiment 1: random masking"), folder / "random.png")
    if "halves" in exps:
        images["halves"] = _save(figures.effect_curves(exps["halves"], title="Experiment 2: lower vs upper half"),
                                 folder / "halves.png")
    if "layers" in exps:
        images["layers"] = _save(figures.effect_bars(exps["layers"], [f"layer {r['layer']}" for r in exps["layers"]],
                                                     title="Experiment 3: one whole layer masked"),
                                 folder / "layers.png")
    if "term" in exps:
        labels = ["term heads", "random heads", "lower half", "lower \\ term"]
        images["term"] = _save(figures.effect_bars(exps["term"], labels, title="Experiment 5: term-matching heads"),
                               folder / "term.png")
    probes = result.get("probes")
    if probes:
        names = tuple(n for n in PROBES if n in probes)
        images["probes"] = _save(figures.probe_heatmaps(probes, names), folder / "probes.png")
        ex = result.get("example")
        if ex and ex["heads"]:
            grid = figures.attention_grid(ex["maps"], ex["tokens"], ex["heads"], length=ex.get("length"))
            images["attention"] = _save(grid, folder / "attention.png")
    return images


def _csv_cell(value) -> str:
    """A number as importance.csv writes it: an empty field where it is undefined (NaN, as the report's '–' and
    importance.json's null), never the text 'nan' that a spreadsheet reads as a word."""
    value = float(value)
    return f"{value:.6g}" if np.isfinite(value) else ""


def write_csv(path: Path, result: dict) -> None:
    """importance.csv: one row per head the model has, its scores, effects and probes; undefined ones empty."""
    scores = result["scores"]
    layers, width = next(iter(scores.values())).shape
    table = {(r["layer"], r["head"]): r for r in result.get("ablation_table") or []}
    probes = result.get("probes") or {}
    probe_names = [n for n in PROBES if n in probes]
    effect_keys = ["relative_accuracy_pct", "loss_delta", "spearman_delta", "flip_rate"] if table else []
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["layer", "head", *scores, *effect_keys, *probe_names])
    for layer in range(layers):
        for head in range(width):
            vals = [float(s[layer, head]) for s in scores.values()]
            if not any(np.isfinite(vals)):
                continue  # a head the pruned model no longer has
            row = table.get((layer, head), {})
            w.writerow([layer, head, *map(_csv_cell, vals), *(_csv_cell(row.get(k, float("nan"))) for k in effect_keys),
                        *(_csv_cell(probes[n][layer][head]) for n in probe_names)])
    write_text(path, buf.getvalue())


def write_scan(folder, result: dict, *, model_info: dict, data_info: dict) -> dict[str, str]:
    """Write every output of a scan into `folder`; returns {figure name: file name}."""
    folder = Path(folder)
    extra = {k: result[k] for k in ("baseline", "ablation_table", "experiments", "correlations", "top10_overlap",
                                    "ranking", "settings", "fisher_targets")
             if k in result}
    if "probes" in result:
        extra["probes"] = result["probes"]
    write_scores(folder / "importance.json", result["scores"], model_info=model_info, data_info=data_info,
                 extra=jsonable(extra))
    write_csv(folder / "importance.csv", result)
    shape = tuple(next(iter(result["scores"].values())).shape)
    images = write_figures(folder, result, shape)
    blocks = report_blocks(result, model_info=model_info, data_info=data_info, images=images)
    write_text(folder / "report.md", render_markdown(blocks))
    write_text(folder / "report.html", render_html(blocks, folder))
    return images
