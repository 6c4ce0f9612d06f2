"""A benchmark's report: the markdown table, the throughput-vs-agreement figure, and the files bench writes."""
from __future__ import annotations

from pathlib import Path

from headcut_grader.files import atomic_file, write_json, write_text

from headcut.evaluate.scan_report import code_span, markdown_text
from headcut.evaluate.tasks import missing, shown
from headcut.export.bench import BenchResult


def write_bench(result: BenchResult, folder: str | Path, *, notes: str = "") -> str:
    """Write bench.json, bench.md (the table, then `notes`) and bench.png into `folder` (made if missing),
    each file atomically; returns the markdown. `headcut bench` passes its atomic output folder."""
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    report = result.to_dict()
    table = markdown(report) + notes
    write_json(folder / "bench.json", report)
    write_text(folder / "bench.md", table)
    fig = figure(report)
    try:
        with atomic_file(folder / "bench.png") as f:  # its own temporary: two writers of one folder never share one
            fig.savefig(f, dpi=130, format="png")
    finally:
        plt.close(fig)
    return table

def cell(row: dict, batch: int, seq: int) -> dict | None:
    return next((c for c in row["cells"] if c["batch"] == batch and c["seq"] == seq), None)


def headline(report: dict, batch: int = 32, seq: int = 64) -> tuple[int, int]:
    """The cell the summary row and the figure show: batch x seq where the grid has it, else the grid's largest
    batch at its longest sequence."""
    cells = {(c["batch"], c["seq"]) for c in report["variants"][0]["cells"]}
    return (batch, seq) if (batch, seq) in cells else max(cells)


def markdown(report: dict, *, batch: int = 32, seq: int = 64) -> str:
    """One row per variant at the headline cell, then the full p50 grid."""
    batch, seq = headline(report, batch, seq)
    s = report["settings"]
    lines = [f"Threads {s['threads']}, warm-up {s['warmup']}, {s['repeats']} timed runs per cell; accuracy and "
             f"agreement with {code_span(report['reference'])} on {report['data']['rows']} pairs of "
             f"{markdown_text(report['data']['source'])}.",
             _machine_line(report),
             "", f"| variant | size MiB | memory MiB | accuracy | Spearman | agreement | p50 ms | p95 ms | pairs/s "
                 f"| speedup (b{batch} x s{seq}) | GFLOP/s | of peak |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in report["variants"]:
        c = cell(row, batch, seq)
        achieved, peak = c.get("gflop_per_s"), row.get("peak_gflop_per_s")
        share = f"{achieved / peak:.1%} of {peak:.0f}" if achieved and peak else "-"
        lines.append(f"| {markdown_text(row['name'], cell=True)} | {row['size_mb']:.1f} | {row['memory_mb']:.0f} "
                     f"| {shown(row.get('accuracy'), '.4f')} "
                     f"| {shown(row.get('spearman'), '.4f')} | {shown(row['agreement'], '.2%')} | {c['p50_ms']:.1f} "
                     f"| {c['p95_ms']:.1f} | {c['pairs_per_s']:.0f} | {c['speedup']:.2f}x "
                     f"| {f'{achieved:.1f}' if achieved else '-'} | {share} |")
    lines += ["", "p50 ms per batch (batch x sequence):", ""]
    shapes = [(c["batch"], c["seq"]) for c in report["variants"][0]["cells"]]
    lines.append("| variant | " + " | ".join(f"{b}x{q}" for b, q in shapes) + " |")
    lines.append("|---|" + "---:|" * len(shapes))
    for row in report["variants"]:
        p50s = " | ".join(f"{cell(row, b, q)['p50_ms']:.1f}" for b, q in shapes)
        lines.append(f"| {markdown_text(row['name'], cell=True)} | {p50s} |")
    return "\n".join(lines) + "\n"


def _machine_line(report: dict) -> str:
    m = report.get("machine")
    if not m:
        return ""
    return (f"\nMachine: {m['cpu']['model']}, {m['cpu']['cores']} cores at {m['ghz']:.2f} GHz, flags "
            f"{' '.join(m['cpu']['flags']) or 'none'}; {', '.join(f'{k} {v}' for k, v in m['runtimes'].items())}. "
            "Peak = threads x clock x FLOPs per cycle per core at the variant's precision (theoretical).")


MARKERS = {"pytorch": "s", "onnxruntime": "o", "openvino": "^"}


def figure(report: dict, *, batch: int = 32, seq: int = 64):
    """Throughput vs agreement with the reference at one cell, one point per variant, named in the legend (accuracy
    barely moves on graded data, so agreement is what separates graders); returns a matplotlib Figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from headcut.evaluate.figures import literal

    batch, seq = headline(report, batch, seq)
    fig, ax = plt.subplots(figsize=(8.5, 4.4))
    for row in report["variants"]:
        c = cell(row, batch, seq)
        if missing(row["agreement"]):  # nothing to agree on (NaN in memory, null read back): no point
            continue
        ax.scatter(c["pairs_per_s"], 100 * row["agreement"], marker=MARKERS.get(row["kind"], "o"), s=50,
                   label=literal(row["name"]))
    ax.set_xlabel(f"pairs per second (batch {batch} x sequence {seq}, {report['settings']['threads']} threads)")
    ax.set_ylabel(f"% same grade as {literal(report['reference'])}")
    ax.set_title("Throughput vs agreement (square: PyTorch, circle: ONNX Runtime, triangle: OpenVINO)", fontsize=9)
    ax.grid(alpha=0.3)
    if ax.collections:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    else:
        ax.text(0.5, 0.5, "no agreement to show: no two titles of one query in the data", ha="center",
                transform=ax.transAxes)
    fig.tight_layout()
    return fig
