"""The documentation runs: every shell and Python block of README.md and docs/ is executed, the flags of every
recorded `$ headcut ...` log are checked against the command line, `mkdocs build --strict` passes, and two
rendered pages are checked (and photographed) in headless Chromium.

Conventions (docs/contributing.md says the same to writers):
  ```bash / ```python   executed in order, one page at a time, in a folder holding the example files
                        (my-grader/, train.tsv, dev.tsv, pairs.tsv); `headcut` and `headcut-grader` run
                        in this process (typer's runner), anything else in bash
  ```console            a recorded run (`$ ` lines and their output): not executed, but every option of every
                        `headcut` / `headcut-grader` command in it must exist
  <!-- run -->           on the line before a console block: its `$ ` commands run, each line shown under one must
                        appear in what it prints, and one shown printing `error:` must exit with code 2
  <!-- skip: REASON --> on the line before a block: not executed (its options are still checked); counted below
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT, need_minilm, tiny_model

sys.path.insert(0, str(ROOT / "docs"))
import hooks  # noqa: E402  (docs/hooks.py: the generated pages)

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN = {"bash", "sh", "python"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
SKIP = re.compile(r"<!-- skip: (.+?) -->\s*$")
CHECKED = "<!-- run -->"  # before a console block: run its `$ ` commands and compare what they print


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    skip: str | None
    checked: bool = False

    @property
    def runs(self) -> bool:
        return not self.skip and (self.lang in RUN or self.lang == "console" and self.checked)

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2),
                         skip.group(1) if skip else None, before.strip() == CHECKED))
    return out


ALL = [b for page in PAGES for b in blocks(page)]
RUNNABLE = [p for p in PAGES if any(b.runs for b in blocks(p))]


def commands(code: str) -> list[str]:
    """Shell command lines of a block, continuation lines joined; `$ ` prompts of console blocks only."""
    lines, joined = code.split("\n"), []
    console = any(line.startswith("$ ") for line in lines)
    current = None
    for line in lines:
        if current is not None:
            current += " " + line.strip()
        elif console and not line.startswith("$ "):
            continue
        else:
            current = line[2:] if console else line
        if current.rstrip().endswith("\\"):
            current = current.rstrip()[:-1]
            continue
        if current.strip():
            joined.append(current.strip())
        current = None
    return joined


# ---- the example workspace: a small "own grader" and pairs, made once and copied per page -------------------

@pytest.fixture(scope="session")
def workspace(tmp_path_factory):
    need_minilm()
    from transformers import AutoTokenizer

    from headcut.synthetic import synthetic_pairs
    from headcut.models import LoadedModel, resolve_source, save_model

    root = tmp_path_factory.mktemp("docs-workspace")
    for name, rows, seed in (("train.tsv", 120, 0), ("dev.tsv", 60, 1), ("pairs.tsv", 30, 2)):
        pairs = synthetic_pairs(rows, seed=seed)
        lines = ["query\ttitle\tgrade"] + [f"{q}\t{t}\t{pairs.grades[y]}"
                                           for q, t, y in zip(pairs.queries, pairs.titles, pairs.labels)]
        (root / name).write_text("\n".join(lines) + "\n")
    tokenizer = AutoTokenizer.from_pretrained(resolve_source("minilm-l6"))
    # a 3-layer x 4-head BERT with MiniLM's tokenizer stands in for the user's fine-tuned grader
    model = tiny_model("bert", attn="sdpa", vocab_size=tokenizer.vocab_size, num_hidden_layers=3,
                       initializer_range=0.4)
    meta = {"kind": "finetune", "grades": [1, 2, 3, 4, 5], "max_length": 32,
            "dev_data": {"path": str(root / "dev.tsv"), "preset": None}}
    save_model(LoadedModel(model, tokenizer, meta), root / "my-grader")
    (root / "recipes").symlink_to(ROOT / "recipes")  # as in a checkout: `cp recipes/...` examples
    return root


# Pages start from the same files, so the same command on the same folder makes the same outputs: a command
# run by an earlier page is not run again, its outputs are copied (the slow prune of the quick start is shared).
_MEMO: dict[tuple, tuple[Path, list[str], str]] = {}


def invoke(line: str, cwd: Path, memo_dir: Path) -> tuple[int, str]:
    """Run one `headcut` / `headcut-grader` command line in this process: (exit code, stdout and stderr)."""
    from headcut.cli.main import app as toolkit
    from headcut_grader.cli.main import app as runtime

    words = shlex.split(line, comments=True)
    key = (line, tuple(sorted(w for w in words if (cwd / w).exists())))  # the same files in, the same out
    if key in _MEMO:
        saved, names, output = _MEMO[key]
        for name in names:
            (shutil.copytree if (saved / name).is_dir() else shutil.copy2)(saved / name, cwd / name)
        return 0, output
    before = {p.name for p in cwd.iterdir()}
    result = CliRunner().invoke({"headcut": toolkit, "headcut-grader": runtime}[words[0]], words[1:])
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    if result.exception and not isinstance(result.exception, SystemExit):
        output += f"\n{result.exception!r}"
    if result.exit_code == 0:
        saved = memo_dir / str(len(_MEMO))
        saved.mkdir(parents=True, exist_ok=True)
        names = sorted({p.name for p in cwd.iterdir()} - before)
        for name in names:
            (shutil.copytree if (cwd / name).is_dir() else shutil.copy2)(cwd / name, saved / name)
        _MEMO[key] = (saved, names, output)
    return result.exit_code, output


def run_shell(block: Block, cwd: Path, memo_dir: Path) -> None:
    for line in commands(block.code):
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] in ("headcut", "headcut-grader") and not set(line) & set("|><;&$`"):
            code, output = invoke(line, cwd, memo_dir)
            assert code == 0, f"{block.where()}: `{line}` exited {code}:\n{output[-3000:]}"
        else:
            env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
            done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", line], cwd=cwd, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"{block.where()}: `{line}` exited {done.returncode}:\n{done.stderr[-3000:]}"


def run_console(block: Block, cwd: Path, memo_dir: Path) -> None:
    """Each `$ ` command runs; every line printed under it in the block must appear in what it prints (a line
    ending in a comma may be cut short), and a command shown printing `error:` must exit with code 2."""
    lines = block.code.rstrip("\n").split("\n")
    starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
    for n, i in enumerate(starts):
        line = lines[i][2:]
        expected = [e for e in lines[i + 1:(starts[n + 1] if n + 1 < len(starts) else len(lines))] if e.strip()]
        code, output = invoke(line, cwd, memo_dir)
        flat = " ".join(output.split())
        for text in expected:
            assert " ".join(text.split()) in flat, (f"{block.where()}: `{line}` did not print {text!r}:\n"
                                                    f"{output[-2000:]}")
        wanted = 2 if any(e.startswith("error:") for e in expected) else 0
        assert code == wanted, f"{block.where()}: `{line}` exited {code}, not {wanted}:\n{output[-2000:]}"


@pytest.fixture
def registry_kept():
    """A page's example may register a criterion (docs/concepts.md's upper_first); the registry is put back after
    the page, so no later test in the same process sees the example's criterion among the names it lists."""
    from headcut.evaluate.criteria import CRITERIA

    registered = dict(CRITERIA)
    yield
    CRITERIA.clear()
    CRITERIA.update(registered)


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_on_the_page_runs(page, workspace, tmp_path, monkeypatch, one_thread, registry_kept):
    folder = shutil.copytree(workspace, tmp_path / "work", symlinks=True)
    monkeypatch.chdir(folder)
    memo_dir = workspace.parent / "docs-memo"
    namespace: dict = {"__name__": "__docs__"}
    for block in blocks(page):
        if not block.runs:
            continue
        if block.lang == "python":
            exec(compile(block.code, block.where(), "exec"), namespace)
        elif block.lang == "console":
            run_console(block, folder, memo_dir)
        else:
            run_shell(block, folder, memo_dir)


def _options(prog: str, name: str) -> set[str] | None:
    command = hooks.cli_commands(prog).get(name)
    if command is None:
        return None
    return {o for p in command.params for o in [*p.opts, *p.secondary_opts] if o.startswith("-")} | {"--help"}


def shown_commands() -> list[tuple[str, str]]:
    """(where, command line) of every command the docs show: in shell, Python, console and text blocks (the
    README's install lines), and in inline code (`headcut prune --flops 0.5 ...` in a sentence)."""
    shown = [(b.where(), line) for b in ALL if b.lang in RUN | {"console", "text"} for line in commands(b.code)]
    for page in PAGES:
        spans = re.findall(r"`((?:headcut|headcut-grader) [^`]+)`", FENCE.sub("", page.read_text()))
        shown += [(str(page.relative_to(ROOT)), " ".join(span.split())) for span in spans]
    return shown


def test_every_option_in_the_docs_exists():
    """Recorded logs, skipped blocks and inline commands are not run, so their commands' options are checked
    here: a renamed flag fails this test, not a reader."""
    checked = 0
    for where, line in shown_commands():
        words = shlex.split(line, comments=True)
        if len(words) < 2 or words[0] not in ("headcut", "headcut-grader") or words[1].isupper():  # `headcut COMMAND`
            continue
        word, name = words[0], next((w for w in words[1:] if not w.startswith("-")), "")
        options = _options(word, name) if not words[1].startswith("-") else _options(word, "")
        assert options is not None, f"{where}: `{word} {name}` is not a command"
        used = {w.split("=")[0] for w in words[1:] if re.match(r"-[-a-zA-Z]", w)}
        assert used <= options, f"{where}: `{word} {name}` has no option {sorted(used - options)}"
        checked += 1
    for prog in ("headcut", "headcut-grader"):  # the examples in each command's --help, too
        for name, command in hooks.cli_commands(prog).items():
            for paragraph in (command.help or "").split("\n\n"):
                for line in hooks.help_examples(paragraph) if paragraph.startswith("Example") else []:
                    words = shlex.split(line.split(", then")[0].split(" (")[0])
                    if words[0] in ("headcut", "headcut-grader"):
                        used = {w.split("=")[0] for w in words[2:] if re.match(r"-[-a-zA-Z]", w)}
                        assert used <= _options(words[0], words[1]), (prog, name, line)
                        checked += 1
    assert checked >= 40, checked


def benchmark_commands(page: Path) -> list[tuple[str, list[str]]]:
    """(script, its words) of every `benchmarks/NAME.py ...` a page shows, in a code block or inline code (a
    benchmark's own name alone counts too)."""
    text = page.read_text()
    lines = [line for m in FENCE.finditer(text) for line in commands(m.group(2))]
    lines += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", FENCE.sub("", text))]
    found = []
    for line in lines:
        for m in re.finditer(r"(benchmarks/)?\b(\w+\.py)(.*)", line):  # `serve_load.py ...` in a table, too
            if m.group(1) or (ROOT / "benchmarks" / m.group(2)).is_file():
                found.append((m.group(2), m.group(3).split("`")[0].split()))
    return found


def test_every_benchmark_script_in_the_docs_runs_with_its_options():
    """A docs page that names `benchmarks/X.py --flag` names a script that starts (its --help) and has that flag."""
    shown: dict[str, set[str]] = {}
    for page in PAGES:
        for script, words in benchmark_commands(page):
            shown.setdefault(script, set()).update(w.split("=")[0] for w in words if re.match(r"--[a-z]", w))
    assert len(shown) >= 10, sorted(shown)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "grader")])}
    for script, flags in sorted(shown.items()):
        path = ROOT / "benchmarks" / script
        assert path.is_file(), f"the docs name benchmarks/{script}, which does not exist"
        done = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0, f"benchmarks/{script} --help exited {done.returncode}:\n{done.stderr[-2000:]}"
        known = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", done.stdout))
        assert flags <= known, f"benchmarks/{script} has no option {sorted(flags - known)}"


def test_the_int8_batch_drift_figure_s_command_passes_the_batch_it_was_measured_at():
    """Was: benchmarks/int8_batch.py passed batch_dependence batch_size=32, then its default (16, what export
    measures), while docs/benchmarks.md's 'dynamic INT8 moved 11 grades' was measured at 32 by a command that names
    no batch, so the command no longer reproduced its figure. Now the script's --batch-size defaults to
    batch_dependence's own and the page's command passes --batch-size 32."""
    import importlib.util
    import inspect

    from headcut.export.quantize import batch_dependence

    path = ROOT / "benchmarks" / "int8_batch.py"
    spec = importlib.util.spec_from_file_location("int8_batch", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    args = script.parse_args(["--model", "M", "--data", "FILE"])
    assert args.batch_size == inspect.signature(batch_dependence).parameters["batch_size"].default
    assert "batch_size=args.batch_size" in path.read_text()
    shown = [words for name, words in benchmark_commands(ROOT / "docs" / "benchmarks.md") if name == path.name]
    assert shown
    for words in shown:
        assert "--batch-size" in words and words[words.index("--batch-size") + 1] == "32", words


def test_skipped_examples_say_why_and_are_few():
    runnable = [b for b in ALL if b.lang in RUN or b.checked]
    skipped = [b for b in runnable if b.skip]
    recorded = [b for b in ALL if b.lang == "console" and not b.checked]
    print(f"\ndocs examples: {len(runnable) - len(skipped)} blocks run, {len(skipped)} skipped, "
          f"{len(recorded)} recorded logs with their options checked; skipped:")
    for b in skipped:
        print(f"  {b.where()}: {b.skip}")
    assert all(len(b.skip) > 10 for b in skipped)
    assert len(skipped) <= len(runnable) // 3


def test_generated_pages_cover_every_recipe_field_and_command():
    import dataclasses

    recipes = hooks.recipes_markdown()
    for _, _, cls in hooks.recipe_classes():
        for f in dataclasses.fields(cls):
            assert f.name in ("source", "overrides") or f"| `{f.name}` |" in recipes, (cls.__name__, f.name)
    for prog in ("headcut", "headcut-grader"):
        text = hooks.cli_markdown(prog)
        for name, command in hooks.cli_commands(prog).items():
            assert f"### `{prog}{' ' + name if name else ''}`" in text
            for p in command.params:
                assert all(o in text for o in p.opts), (prog, name, p.opts)


def test_the_readme_stays_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 160, len(lines)
    for link in re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines)):
        assert (ROOT / link).exists(), link


# ---- the site ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def _site_build(tmp_path_factory):
    """`mkdocs build --strict` starts with this module's first test and runs beside the examples."""
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        yield None
        return
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "grader")])}
    build = subprocess.Popen([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    yield out, build
    if build.poll() is None:
        build.kill()
    build.communicate()


@pytest.fixture(scope="module")
def site(_site_build):
    if _site_build is None:
        pytest.skip("mkdocs not installed (make setup installs the dev extra)")
    out, build = _site_build
    log, _ = build.communicate(timeout=300)
    assert build.returncode == 0, log[-4000:]
    return out


def test_the_site_builds_strictly(site):
    assert (site / "index.html").exists() and (site / "reference" / "cli" / "index.html").exists()
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "--keep-ratio" in cli and "headcut-grader serve" in cli  # generated from the typer apps at build time
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "prune_to_budget" in api and "write_artifact" in api and "Grader" in api


def _browser():
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        pytest.skip("no headless browser installed (apt-get install chromium; `make test` installs it)")
    return found


@pytest.mark.parametrize("page", ["index.html", "reference/cli/index.html"])
def test_a_docs_page_renders_in_a_headless_browser(site, page, tmp_path):
    """The page's own stylesheet and scripts load (material's header and navigation are drawn), and a screenshot
    shows more than a blank page. HEADCUT_DOCS_SHOTS=DIR keeps the screenshots."""
    browser = _browser()
    path = site / page
    flags = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
             "--virtual-time-budget=4000", "--hide-scrollbars"]
    dom = subprocess.run([*flags, "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120)
    assert 'class="md-header' in dom.stdout and "md-nav" in dom.stdout, dom.stderr[-2000:]
    assert 'data-md-color-scheme' in dom.stdout  # set by material's script: the JavaScript ran
    shot = tmp_path / (page.replace("/", "_").replace(".html", ".png"))
    subprocess.run([*flags, "--window-size=1280,1400", f"--screenshot={shot}", path.as_uri()], capture_output=True,
                   timeout=120)
    from PIL import Image

    image = Image.open(shot).convert("L")
    colours = image.getcolors(maxcolors=1 << 16) or []
    assert image.size == (1280, 1400) and len(colours) > 20, len(colours)  # text and a coloured header, not blank
    # the header bar is painted in the theme's colour, not left white (the stylesheet loaded)
    header = image.crop((0, 0, 1280, 40)).histogram()
    assert sum(i * n for i, n in enumerate(header)) / sum(header) < 150
    keep = os.environ.get("HEADCUT_DOCS_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)
