"""Properties of the code itself: no import cycles, the runtime imported by its own name, no undefined names."""
from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

MOVED = ("errors", "ranges", "files", "data", "grader", "serve", "microbatch", "serve_metrics")
PACKAGES = {"headcut": ROOT / "headcut", "headcut_grader": ROOT / "grader" / "headcut_grader"}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = (package, *path.relative_to(folder).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(path: Path, known) -> set[str]:
    """Modules of `known` that `path` imports anywhere (top level or inside a function); `from pkg import
    sub` counts as importing pkg.sub alone when every name is a submodule."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
            out.update(subs if len(subs) == len(node.names) else [node.module, *subs])
    return out & set(known)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on.discard(group[-1])
            if len(group) > 1:
                groups.append(sorted(group))

    for v in edges:
        if v not in index:
            visit(v)
    return groups


def test_cycles_finds_a_circle_of_three():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_back_through_others():
    known = modules()
    edges = {name: imported(path, known) - {name} for name, path in known.items()}
    assert cycles(edges) == []


# DESIGN.md's rooms: what a room's modules may import besides their own room. arch "may use errors": the torch-free
# leaves that check arguments and raise UserError (headcut_grader.errors and .ranges, headcut.model_arguments).
# models "arch, files" and training "batching, evaluate", besides the leaves that declare nothing of a room: the
# runtime's torch-free helpers (RUNTIME), a model folder's files (weight_files), the recorded max_length (batching),
# the version, how pairs are named and drawn (data_spec, synthetic), the process group. Not a pruner's declarations.
RUNTIME = {f"headcut_grader.{name}" for name in ("errors", "ranges", "files", "validation", "data", "optional",
                                                   "tokens", "grader")}
MAY_USE = {"headcut.arch": {"headcut_grader.errors", "headcut_grader.ranges", "headcut.model_arguments"},
           "headcut.models": {"headcut.arch", "headcut.weight_files", "headcut.model_arguments", "headcut.batching",
                              "headcut.version", *RUNTIME},
           "headcut.training": {"headcut.batching", "headcut.evaluate", "headcut.weight_files", "headcut.data_spec",
                                "headcut.synthetic", "headcut.process_group", *RUNTIME,
                                "headcut.recipes"}}  # CommandLine: how a command's refusal names its --set keys
# DESIGN.md's "Never": a room and what it never imports (the runtime never imports the toolkit, torch or transformers'
# modelling code; no library room imports the command line; scores describe a model, they don't change it)
LIBRARY = sorted({name.split(".")[1] for name in modules() if name.startswith("headcut.")} - {"cli", "__main__"})
NEVER = {"headcut_grader": ("headcut", "torch", "transformers.models", "transformers.modeling_utils"),
         **{f"headcut.{room}": ("headcut.cli",) for room in LIBRARY}}
NEVER["headcut.evaluate"] += ("headcut.prune", "headcut.distill", "headcut.export")


def every_import(path: Path) -> set[str]:
    """Every module `path` imports by name, the project's or another's (torch, transformers.models.bert), anywhere;
    `from pkg import name` counts as pkg and pkg.name."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
    return out


def _in(name: str, room: str) -> bool:
    return name == room or name.startswith(room.rstrip(".") + ".")


def test_each_room_imports_only_what_the_design_lets_it():
    """Was: arch.surgery, then models.save_cross_encoder, imported headcut.prune_arguments to name the prune setting
    that keeps layers in widen's refusal: a lower room leaning on the pruner's declarations. Now save_cross_encoder's
    callers pass that name in (keep_layers_said), and models and training are checked too."""
    known = modules()
    broken = [f"{name} imports {other}" for room, allowed in MAY_USE.items() for name, path in known.items()
              if _in(name, room) for other in imported(path, known) if not _in(other, room) and other not in allowed]
    broken += [f"{name} imports {other}" for room, never in NEVER.items() for name, path in known.items()
               if _in(name, room) for other in every_import(path) if any(_in(other, n) for n in never)]
    assert broken == []


def test_the_toolkit_imports_the_runtime_by_its_own_name():
    """`headcut.data` and the other moved names are deprecated aliases: nothing here may lean on them."""
    old = {f"headcut.{name}" for name in MOVED}
    files = [*(ROOT / "headcut").rglob("*.py"), *(ROOT / "tests").glob("*.py"), *(ROOT / "benchmarks").glob("*.py"),
             *(ROOT / "docs").rglob("*.py")]
    leaning = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            leaning += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n in old]
    assert leaning == []


def test_the_old_runtime_names_still_import_with_a_deprecation_warning():
    code = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as seen:
    import headcut.data
    from headcut.grader import Grader
import headcut_grader.data, headcut_grader.grader
assert headcut.data.read_pairs is headcut_grader.data.read_pairs and Grader is headcut_grader.grader.Grader
import headcut.synthetic
assert headcut.data.synthetic_pairs is headcut.synthetic.synthetic_pairs  # moved on to the toolkit
print(sorted(str(w.message) for w in seen if w.category is DeprecationWarning))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "headcut.data is deprecated and goes in the next release; import headcut_grader.data instead." in out
    assert "import headcut_grader.grader instead" in out


def test_no_module_uses_a_name_it_never_defines_or_imports():
    """An undefined name in a rarely taken branch (an error message's helper that was never imported) is a NameError,
    exit 1, only when a user hits that branch: pyflakes finds every one without running the code. An annotation's
    name is imported too (a postponed one is read by typing.get_type_hints and the docs). Was: arch/table.py named
    LayerParts, defined in arch/layers.py (which imports the table), under `noqa: F821`; it lives in arch/parts.py."""
    folders = [ROOT / "headcut", ROOT / "grader" / "headcut_grader", ROOT / "tests", ROOT / "benchmarks"]
    result = subprocess.run([sys.executable, "-m", "pyflakes", *map(str, folders)], capture_output=True, text=True)
    undefined = [message for message in result.stdout.splitlines() if "undefined name" in message]
    assert result.returncode in (0, 1) and not result.stderr.strip(), result.stderr
    assert not undefined, "\n".join(undefined)


REEXPORTS = [ROOT / "headcut" / "cli" / "common.py"]  # re-exports the runtime's shared options to headcut's commands


def unused_imports(folders: list[Path], reexports: list[Path] = REEXPORTS) -> list[str]:
    """pyflakes' 'imported but unused' messages of `folders`, less a re-export module's (`reexports`) import statement
    marked `# noqa: F401` on its first line, the line pyflakes names (pyflakes itself reads no noqa)."""
    result = subprocess.run([sys.executable, "-m", "pyflakes", *map(str, folders)], capture_output=True, text=True)
    assert result.returncode in (0, 1) and not result.stderr.strip(), result.stderr
    lines = {path: path.read_text(encoding="utf-8").splitlines() for path in reexports}

    def reexported(message: str) -> bool:
        where = re.match(r"(.+?):(\d+):", message)
        path = Path(where.group(1)) if where else None
        return path in lines and "# noqa: F401" in lines[path][int(where.group(2)) - 1]

    return [message for message in result.stdout.splitlines()
            if "imported but unused" in message and not reexported(message)]


def test_no_module_imports_a_name_it_never_uses():
    """An import nothing reads misleads (it looks like a dependency) and keeps a module loaded for nothing.
    headcut/cli/common.py re-exports the runtime's shared options to headcut's commands under `# noqa: F401`, which
    is its purpose; any other import of it is checked (was: the whole file was passed over). Was also:
    headcut_grader/pairs.py imported TASKS under `noqa: F401` and never read it."""
    unused = unused_imports([ROOT / "headcut", ROOT / "grader" / "headcut_grader", ROOT / "benchmarks"])
    assert not unused, "\n".join(unused)


def test_an_unused_import_beside_the_re_exports_is_found(tmp_path):
    """Only the re-export statement marked `# noqa: F401` is passed over: an import planted elsewhere in
    headcut/cli/common.py that nothing reads is reported."""
    planted = tmp_path / "common.py"
    text = REEXPORTS[0].read_text(encoding="utf-8").replace("import sys\n", "import sys\nimport json\n", 1)
    planted.write_text(text, encoding="utf-8")
    line = text.splitlines().index("import json") + 1
    assert unused_imports([planted], [planted]) == [f"{planted}:{line}:1: 'json' imported but unused"]


def test_one_rule_spells_an_argument_as_a_flag():
    """A library check names an argument as its caller wrote it through headcut_grader.errors.named alone; was: serve
    (_name), grade_file and prune's targets each spelled --NAME from NAME by a copy of that rule."""
    rule = ROOT / "grader" / "headcut_grader" / "errors.py"
    copies = [f"{path.relative_to(ROOT)}:{number}" for path in modules().values() if path != rule
              for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
              if ".replace(\"_\", \"-\")" in line or ".replace('_', '-')" in line]
    assert not copies, f"spell flags through headcut_grader.errors.named: {copies}"


def test_no_library_default_names_a_command_flag():
    """A library function's default for the name its messages give an argument is that argument as a Python caller
    wrote it (`load_model source`, `out`); a command passes its flag, a recipe its key. Was: load_model, the files
    checks, criterion, check_max_length ... defaulted to `--model`, `--out`, `--method`, `--max-length`, so a
    Python caller was told about flags it never had."""
    found = []
    for module, path in modules().items():
        if module.startswith(("headcut.cli", "headcut_grader.cli")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                for default in [*args.defaults, *args.kw_defaults]:
                    if isinstance(default, ast.Constant) and isinstance(default.value, str) and \
                            default.value.startswith("--"):
                        found.append(f"{path.relative_to(ROOT)}:{default.lineno} {node.name}: {default.value!r}")
    assert not found, f"a library default names a command's flag: {found}"


@pytest.mark.parametrize("package, misspelt, meant", [("headcut", "load_modle", "load_model"),
                                                     ("headcut_grader", "GRADER_FORMT", "GRADER_FORMAT")])
def test_each_package_lists_its_names_and_suggests_the_nearest_for_a_misspelt_one(package, misspelt, meant):
    """The packages' public names load on first use (module __getattr__). Was: dir(headcut) and dir(headcut_grader)
    listed none of them, so tab completion and help(headcut) missed them and `headcut.load_modle` raised without
    "Did you mean: 'load_model'?". Now dir lists every name of __all__, and a misspelt one names the nearest."""
    module = importlib.import_module(package)
    assert [name for name in module.__all__ if name not in dir(module)] == []
    namespace: dict = {}
    exec(f"from {package} import *", namespace)
    assert set(module.__all__) <= set(namespace)
    said = subprocess.run([sys.executable, "-c", f"import {package}; {package}.{misspelt}"], capture_output=True,
                          text=True, cwd=ROOT).stderr.splitlines()[-1]  # the interpreter's traceback, as a user sees it
    assert said == f"AttributeError: module '{package}' has no attribute '{misspelt}'. Did you mean: '{meant}'?"


def test_one_rule_leads_a_sentence_with_where_it_was_read():
    """A message about something read from a file or recipe leads with 'WHERE: ' through headcut_grader.errors.lead_of
    alone; was: pipeline.checks and distill.sizes each defined an `_at` of their own, batching and sizes' cut-from
    check spelled it inline."""
    rule = ROOT / "grader" / "headcut_grader" / "errors.py"
    copy = re.compile(r""":\s?['"]\s*if \w+ else (''|"")""")
    copies = [f"{path.relative_to(ROOT)}:{number}" for path in modules().values() if path != rule
              for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if copy.search(line)]
    assert not copies, f"lead a sentence with headcut_grader.errors.lead_of: {copies}"


def test_no_library_or_benchmark_call_passes_a_batch_size_written_as_a_number():
    """A forward pass batches the declared default (evaluate_arguments.DEFAULTS, the callee's own literal default,
    checked by test_the_library_s_shared_setting_defaults_equal_the_declared_ones) or a named size of its own
    (PROBE_BATCH_SIZE, units_batch_size, export's GATE_BATCH_SIZE), and a benchmark's --batch-size or --batch flag
    defaults to a declared one. Was: finetune's and distill's dev passes took 128 pairs, a run's bench 64 and
    `headcut bench`'s PyTorch and grader quality passes 32, each written at its call; benchmarks/int8_batch.py
    passed batch_dependence batch_size=32 (export takes its default, 16), prune_curve.py's and scan_speed.py's
    --batch-size wrote DEFAULTS' 64, prune_speed.py's --batch prune's LATENCY_BATCH (32) and fused_attention.py's
    --batch export's TIMING_SHAPE batch (32)."""
    paths = [*modules().values(), *(ROOT / "benchmarks").glob("*.py")]
    found = [f"{path.relative_to(ROOT)}:{node.lineno} {k.arg}={k.value.value}" for path in paths
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.Call)
             for k in node.keywords if isinstance(k.value, ast.Constant) and isinstance(k.value.value, int)
             and (k.arg in ("batch_size", "batch") or k.arg == "default" and any(
                 isinstance(a, ast.Constant) and a.value in ("--batch-size", "--batch") for a in node.args))]
    assert not found, f"name the batch size or leave the callee's declared default: {found}"


def test_every_call_that_cuts_a_graph_s_batches_names_the_model_export_names():
    """batch_dependence and onnx_logits cut an eager-attention model's batches by its attention scores' size, and only
    when told the model (model=...); export always tells them. Was: benchmarks/int8_batch.py called both without it,
    so on such a model it graded other batches than export judges, and reported a batch dependence export never
    measured. A call by a module's name (quantize.batch_dependence(...)) counts as one by the bare name."""
    paths = [*modules().values(), *(ROOT / "benchmarks").glob("*.py")]
    found = [f"{path.relative_to(ROOT)}:{node.lineno} {called(node)}" for path in paths
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Call) and called(node) in ("batch_dependence", "onnx_logits")
             and "model" not in {k.arg for k in node.keywords}]
    assert not found, f"pass model=, as export does (headcut/export/build.py): {found}"


def called(node: ast.Call) -> str | None:
    """The name a call calls: f for f(...), f for module.f(...); None for any other call."""
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def runtime_defaults(argument: str) -> dict:
    """Each default of `argument` that the runtime's functions write as a value (not a call, as a typer option is),
    by 'module.function'."""
    written = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if name.startswith("headcut_grader") and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                defaults = [*zip(args.args[::-1], args.defaults[::-1]), *zip(args.kwonlyargs, args.kw_defaults)]
                written.update((f"{name}.{node.name}", d) for a, d in defaults
                               if a.arg == argument and d is not None and not isinstance(d, ast.Call))
    return written


def test_the_runtime_s_batch_size_defaults_equal_its_declared_ones():
    """headcut_grader declares its batch sizes once, in headcut_grader.ranges (it cannot import headcut's
    evaluate_arguments): BATCH_SIZE offline, SERVE_BATCH_SIZE a server's. Every batch_size default of its functions
    (Grader, ray_data's GradeBatch and grade_dataset) is a number, as the API reference shows it, equal to
    BATCH_SIZE; GradeSettings, `grade --batch-size` and `serve --batch-size` read theirs. Was: 32 written in
    grader.py, grade_file.py, cli/grade.py and twice in ray_data.py, agreeing by hand."""
    import dataclasses

    from typer.main import get_command

    from headcut_grader.cli.main import app
    from headcut_grader.grade_file import GradeSettings
    from headcut_grader.ranges import BATCH_SIZE, SERVE_BATCH_SIZE
    from headcut_grader.serve import Batching

    written = runtime_defaults("batch_size")  # a command's typer option (a call) is checked below as the flag's default
    assert {"headcut_grader.grader.__init__", "headcut_grader.ray_data.__init__",
            "headcut_grader.ray_data.grade_dataset"} <= set(written)
    wrong = {where: ast.unparse(d) for where, d in written.items()
             if not (isinstance(d, ast.Constant) and d.value == BATCH_SIZE)}
    assert not wrong, f"write ranges.BATCH_SIZE ({BATCH_SIZE}) as the default: {wrong}"
    fields = {cls.__name__: next(f.default for f in dataclasses.fields(cls) if f.name == "batch_size")
              for cls in (GradeSettings, Batching)}
    assert fields == {"GradeSettings": BATCH_SIZE, "Batching": SERVE_BATCH_SIZE}
    flags = {name: next(p.default for p in command.params if p.name == "batch_size")
             for name, command in get_command(app).commands.items()}
    assert flags == {"grade": BATCH_SIZE, "serve": SERVE_BATCH_SIZE}


def test_grade_s_flags_read_their_defaults_from_grade_settings():
    """`headcut grade`'s --workers, --batch-size and --chunk-rows read their defaults and ranges from GradeSettings
    (field_option), as serve's read Limits. Was: cli/grade.py wrote 1 and 10_000 again beside GradeSettings."""
    import dataclasses

    from typer.main import get_command

    from headcut_grader.cli.main import app
    from headcut_grader.grade_file import GradeSettings

    tree = ast.parse((ROOT / "grader" / "headcut_grader" / "cli" / "grade.py").read_text(encoding="utf-8"))
    grade = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "grade")
    written = [ast.unparse(flag) for flag in grade.args.defaults if isinstance(flag, ast.Call)
               and any(isinstance(a, ast.Constant) and type(a.value) in (int, float) for a in flag.args)]
    assert not written, f"read the default from GradeSettings (field_option): {written}"
    declared = {f.name: f.default for f in dataclasses.fields(GradeSettings)}
    command = get_command(app).commands["grade"]
    for name in ("workers", "batch_size", "chunk_rows"):
        assert next(p.default for p in command.params if p.name == name) == declared[name], name


def test_the_runtime_s_threads_default_equals_its_declared_one():
    """The runtime's threads per grader (1: a server or grade job runs several workers) is declared once, as
    headcut_grader.ranges.RUNTIME_THREADS: every threads default of its functions (Grader, ray_data's GradeBatch and
    grade_dataset) is a number, as the API reference shows it, equal to it, and GradeSettings reads it. Was: 1
    written in grader.py, grade_file.py and twice in ray_data.py, agreeing by hand."""
    import dataclasses

    from headcut_grader.grade_file import GradeSettings
    from headcut_grader.ranges import RUNTIME_THREADS

    written = runtime_defaults("threads")
    assert {"headcut_grader.grader.__init__", "headcut_grader.ray_data.__init__",
            "headcut_grader.ray_data.grade_dataset"} <= set(written)
    wrong = {where: ast.unparse(d) for where, d in written.items()
             if not (isinstance(d, ast.Constant) and d.value == RUNTIME_THREADS)}
    assert not wrong, f"write ranges.RUNTIME_THREADS ({RUNTIME_THREADS}) as the default: {wrong}"
    field = next(f for f in dataclasses.fields(GradeSettings) if f.name == "threads")
    assert field.default == RUNTIME_THREADS
    source = (ROOT / "grader" / "headcut_grader" / "grade_file.py").read_text(encoding="utf-8")
    assert "range_field(RUNTIME_THREADS, THREADS)" in source  # read, not written again


def test_serve_load_measures_the_runtime_with_its_declared_batch_settings():
    """benchmarks/serve_load.py times the servers and the offline Grader as they run by default. Was: its offline
    Grader passed batch_size=32 and its --batch-size, --max-batch, --max-wait-ms and --max-queue restated
    serve.Batching's defaults, agreeing with the runtime by hand."""
    import dataclasses
    import importlib.util

    from headcut_grader.serve import Batching

    path = ROOT / "benchmarks" / "serve_load.py"
    spec = importlib.util.spec_from_file_location("serve_load", path)
    serve_load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(serve_load)
    assert {k: v for k, v in vars(serve_load.arguments([])).items() if k in dir(Batching)} == \
        dataclasses.asdict(Batching())
    passed = [f"{path.name}:{node.lineno}" for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
              if isinstance(node, ast.Call) and any(k.arg == "batch_size" for k in node.keywords)]
    assert not passed, f"leave the Grader's batch_size to its declared default: {passed}"


def test_no_module_imports_another_module_s_private_name():
    """A name with a leading underscore is its module's own: a module that imports one from another of headcut's or
    headcut_grader's breaks silently when that module renames it. Was: pipeline/recipe.py imported recipes'
    _led_again; it is the public recipes.led_again."""
    private = [f"{path.relative_to(ROOT)}:{node.lineno} imports {alias.name} from {node.module or '.'}"
               for path in modules().values() for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in PACKAGES)
               for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert not private, "\n".join(private)


def test_grade_s_out_help_reads_as_before_its_wrap():
    from typer.main import get_command

    from headcut_grader.cli.main import app

    help_of = {p.name: p.help for p in get_command(app).commands["grade"].params}
    assert help_of["out"] == ("Where to write grades (same format as the input unless the suffix says: .tsv, .csv or "
                              ".jsonl; JSON input is written as JSON lines).")


def test_what_a_path_that_is_no_regular_file_is_is_worded_once():
    """validation.irregular says what a path is that is no regular file ('a folder', 'not a regular file (a pipe,
    device or socket)'); check_regular and a run's check of its pairs files read it. Was: headcut/pipeline/checks.py
    wrote check_regular's words again."""
    from headcut_grader.validation import irregular

    assert irregular(ROOT) == "a folder" and irregular(Path("/dev/null")).startswith("not a regular file")
    assert irregular(ROOT / "README.md") is None
    sources = [*modules().values(), *(ROOT / "benchmarks").glob("*.py")]
    written = [f"{path.relative_to(ROOT)}" for path in sources
               if "device or socket" in path.read_text(encoding="utf-8")]
    assert written == ["grader/headcut_grader/validation.py"], written


def test_no_line_is_wider_than_120_columns():
    """The house limit is 120 columns; nothing checked it, and about 270 lines had grown past it."""
    folders = [ROOT / "headcut", ROOT / "grader" / "headcut_grader", ROOT / "benchmarks", ROOT / "tests"]
    wide = [f"{path.relative_to(ROOT)}:{number}: {len(line)} columns"
            for folder in folders for path in sorted(folder.rglob("*.py"))
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if len(line) > 120]
    assert not wide, "\n".join(wide)


# A name ending .tmp, .partial, .part or .old (then perhaps one more suffix): a temporary's name that is fixed
FIXED_TEMPORARY = re.compile(r"\.(tmp|partial|part|old)(\.\w+)?$")
# Fixed names that are no writer's temporary: the state a rerun resumes from, kept under a lock, and a sweep's pattern
RESUMED_NAMES = {
    ("headcut/training.py", ".tmp"), ("headcut/training.py", ".old"),  # checkpoints, inside the locked run folder
    ("headcut/run_folder.py", ".partial"),  # OUT.partial: the run folder a rerun resumes, locked (run_folder.lock)
    ("grader/headcut_grader/grade_file.py", ".partial"),  # grade --resume's rows and state, locked (_lock)
    ("grader/headcut_grader/grade_file.py", ".partial.json"),
    ("grader/headcut_grader/files.py", ".*.tmp"),  # clean_stale's pattern for an earlier version's leftovers
}


def fixed_temporary_names(source: str) -> list[tuple[int, str]]:
    """(line, text) of each path-like text in `source` (no space in it; an f-string's literal parts) that ends as a
    fixed temporary's name does: two writers of one output would share it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and " " not in node.value:
            if FIXED_TEMPORARY.search(node.value):
                found.append((node.lineno, node.value))
    return found


def test_no_output_is_written_through_a_fixed_temporary_name():
    """Was: headcut/export/bench_report.py saved bench.png through '.bench.png.partial', one name for every writer, so
    two writers of one folder clobbered each other's temporary (as benchmarks' '.NAME.tmp' did, fa2fd68). Every
    temporary is files.atomic_file's (or temp_sibling's), its writer's own; the names left are resumed state under a
    lock. The check finds each fixed spelling in a sample, and reads benchmarks/ too (their results are outputs: was
    headcut/ and grader/ alone, though a benchmark's '.NAME.tmp' was the first such defect)."""
    sample = 'a = folder / ".bench.png.partial"\nb = ckpt.name + ".tmp"\nc = f".{out.name}.partial"\n' \
             'd = f".{name}.tmp-{os.getpid()}-"\ne = "name the file x.tmp"\n'
    assert fixed_temporary_names(sample) == [(1, ".bench.png.partial"), (2, ".tmp"), (3, ".partial")]
    paths = sorted([*modules().values(), *(ROOT / "benchmarks").glob("*.py")])
    found = [(path.relative_to(ROOT).as_posix(), line, text) for path in paths
             for line, text in fixed_temporary_names(path.read_text(encoding="utf-8"))]
    fixed = [f"{path}:{line} {text!r}" for path, line, text in found if (path, text) not in RESUMED_NAMES]
    assert not fixed, f"write through headcut_grader.files.atomic_file (a temporary of its own): {fixed}"
