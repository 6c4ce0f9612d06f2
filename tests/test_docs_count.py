"""README.md's `make test` line says how many tests the suite holds; a run that collects the whole suite checks
the number, so it cannot go stale. `make readme-count` (this file run as a script) rewrites it from
`pytest --collect-only -q`."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT

README = ROOT / "README.md"
COUNT = re.compile(r"^(make test .*?; )(\d+)( tests,)", re.M)  # the words the count stands in, on one line


def readme_count(text: str) -> int:
    said = COUNT.search(text)
    if said is None:
        raise ValueError("README.md's `make test` line no longer says '...; N tests,' (the words `make readme-count` "
                         "rewrites); put them back")
    return int(said[2])


def with_count(text: str, count: int) -> str:
    readme_count(text)
    return COUNT.sub(lambda said: f"{said[1]}{count}{said[3]}", text, count=1)


def not_whole(config, cuts: list[str]) -> str | None:
    """Why this run's collected tests are not the whole suite, or None where they are: the tests folder alone as
    its path (`make test` names none, so pytest reads testpaths), no --ignore, --ignore-glob or --lf (which leave
    files uncollected without deselecting them), and nothing deselected or cut at collection (conftest.SuiteCuts)."""
    paths = [Path(config.invocation_params.dir, arg).resolve() for arg in config.args]
    if paths != [ROOT / "tests"]:
        return f"it collects {' '.join(config.args)}, not the tests folder alone"
    for flag, dest in (("--ignore", "ignore"), ("--ignore-glob", "ignore_glob"), ("--lf", "lf")):
        if config.getoption(dest, None):
            return f"{flag} is given"
    return "; ".join(cuts) or None


def test_the_readme_says_how_many_tests_the_suite_holds(request):
    """Where this run collects the whole suite (`make test`, `pytest`, `pytest tests/`), README.md's count is the
    number of tests collected; anywhere else it skips, saying why. On a pytest-xdist worker session.items holds
    every collected test too (each worker collects the whole run and runs its share by index)."""
    said = readme_count(README.read_text())
    why = not_whole(request.config, request.config.pluginmanager.get_plugin("suite_cuts").cuts)
    if why:
        pytest.skip(f"README.md's test count is checked only where the whole suite is collected, and {why}")
    held = len(request.session.items)
    assert said == held, (f"README.md says {said} tests and the suite holds {held}; run `make readme-count`, or "
                          f"write {held} in its `make test` line")


def run_of(*args: str, **options) -> SimpleNamespace:
    """A stand-in for pytest's config, run from the repository's root with these path arguments and options."""
    return SimpleNamespace(invocation_params=SimpleNamespace(dir=ROOT), args=list(args),
                           getoption=lambda dest, default=None: options.get(dest, default))


def test_a_run_is_the_whole_suite_only_with_the_tests_folder_alone_and_nothing_cut():
    assert not_whole(run_of("tests"), []) is None
    assert not_whole(run_of("tests/"), []) is None
    assert "not the tests folder alone" in not_whole(run_of("tests/test_docs.py"), [])
    assert "not the tests folder alone" in not_whole(run_of("tests/test_docs.py::test_the_readme_stays_short"), [])
    assert "not the tests folder alone" in not_whole(run_of("tests", "grader"), [])
    assert not_whole(run_of("tests", ignore=["tests/test_run.py"]), []) == "--ignore is given"
    assert not_whole(run_of("tests", lf=True), []) == "--lf is given"
    assert not_whole(run_of("tests"), ["2886 tests deselected"]) == "2886 tests deselected"


def test_what_leaves_a_run_short_of_the_whole_suite_is_recorded():
    from conftest import SuiteCuts

    cuts = SuiteCuts()
    cuts.pytest_deselected([])
    cuts.pytest_collectreport(SimpleNamespace(nodeid="tests/test_docs.py", outcome="passed", skipped=False,
                                              failed=False))
    assert cuts.cuts == []
    cuts.pytest_deselected(["a"])
    cuts.pytest_deselected(["a", "b"])
    cuts.pytest_collectreport(SimpleNamespace(nodeid="tests/test_ray_data.py", outcome="skipped", skipped=True,
                                              failed=False))
    assert cuts.cuts == ["1 test deselected", "2 tests deselected", "tests/test_ray_data.py skipped at collection"]


def test_the_count_is_rewritten_in_its_own_words_alone():
    text = README.read_text()
    assert readme_count(with_count(text, 12345)) == 12345
    assert with_count(with_count(text, 12345), readme_count(text)) == text
    with pytest.raises(ValueError, match="no longer says"):
        readme_count(text.replace(" tests,", " tests in all,"))


def collected() -> int:
    """How many tests `pytest --collect-only -q` finds in the whole suite."""
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                         cwd=ROOT, capture_output=True, text=True)
    found = re.search(r"^(\d+) tests? collected in ", run.stdout, re.M)
    if run.returncode or found is None:
        sys.exit(f"{run.stdout[-3000:]}{run.stderr[-3000:]}\npytest --collect-only did not collect the whole suite "
                 f"cleanly (exit {run.returncode}); fix what it says, then run make readme-count again")
    return int(found[1])


if __name__ == "__main__":  # make readme-count
    from headcut_grader.files import write_text

    count = collected()
    try:
        write_text(README, with_count(README.read_text(), count))
    except ValueError as e:
        sys.exit(str(e))
    print(f"README.md: {count} tests")
