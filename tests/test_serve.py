"""The real server (uvicorn in a subprocess) on loopback: good, concurrent and bad requests."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import ROOT
from headcut.data import synthetic_pairs
from headcut.export.bench import running_server
from headcut.grader import Grader
from test_export import make_tiny_grader

httpx = pytest.importorskip("httpx")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = make_tiny_grader(tmp_path_factory.mktemp("served"))[0]
    args = ("--max-pairs", "16", "--max-text-chars", "200", "--max-body-bytes", "20000")
    running = running_server(folder, workers=2, threads=1, args=args, wait_seconds=60, cwd=ROOT)
    try:
        url = running.__enter__()
    except RuntimeError as e:  # exited, or no /healthz answer in time: the message holds its output
        pytest.fail(str(e))
    try:
        yield url, folder
    finally:
        running.__exit__(None, None, None)


def test_grade_and_rank_answer_like_the_grader(server):
    url, folder = server
    pairs = synthetic_pairs(12, seed=9)
    body = {"pairs": [{"query": q, "title": t} for q, t in zip(pairs.queries, pairs.titles)]}
    reply = httpx.post(url + "/grade", json=body, timeout=30)
    assert reply.status_code == 200
    local = Grader(folder).grade(pairs)
    got = reply.json()["results"]
    assert [r["grade"] for r in got] == local.grades.tolist()
    assert np.allclose([r["expected_grade"] for r in got], local.expected, atol=1e-5)
    ranked = httpx.post(url + "/rank", json={"query": pairs.queries[0], "titles": pairs.titles}, timeout=30).json()
    scores = [r["expected_grade"] for r in ranked["ranking"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == 12


def test_concurrent_requests_all_succeed(server):
    url, _ = server
    pairs = synthetic_pairs(40, seed=3)
    bodies = [{"pairs": [{"query": pairs.queries[i], "title": pairs.titles[i]} for i in range(k, k + 4)]}
              for k in range(0, 36, 3)]
    with httpx.Client(timeout=60) as client, ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda b: client.post(url + "/grade", json=b).status_code, bodies * 2))
    assert codes == [200] * 24


@pytest.mark.parametrize("body, status, words", [
    (b"{not json", 422, "not valid JSON"),
    (b'{"pairs": [{"query": "drill"}]}', 422, "pairs.0.title"),
    (b'{"pairs": []}', 422, "pairs"),
    (b'{"pairs": [{"query": 3, "title": "x"}]}', 422, "pairs.0.query"),
    (b'{"pairs": [{"query": "a", "title": "b", "x": 1}]}', 422, "pairs.0.x"),
    (b'[1, 2]', 422, "body"),
])
def test_bad_requests_get_4xx_with_a_message(server, body, status, words):
    reply = httpx.post(server[0] + "/grade", content=body, headers={"content-type": "application/json"}, timeout=30)
    assert reply.status_code == status and words in reply.json()["error"]


def test_oversize_requests_are_refused_and_the_server_lives_on(server):
    url, _ = server
    many = {"pairs": [{"query": "q", "title": "t"}] * 17}  # --max-pairs 16
    assert httpx.post(url + "/grade", json=many, timeout=30).status_code == 422
    long_text = {"query": "q" * 201, "titles": ["t"]}  # --max-text-chars 200
    assert httpx.post(url + "/rank", json=long_text, timeout=30).status_code == 422
    huge = b'{"pairs": [' + b'{"query": "a", "title": "b"},' * 2000 + b"]}"  # > --max-body-bytes 20000
    reply = httpx.post(url + "/grade", content=huge, headers={"content-type": "application/json"}, timeout=30)
    assert reply.status_code == 413 and "bytes" in reply.json()["error"]

    def chunks():  # no Content-Length: the body limit must still hold
        for _ in range(100):
            yield b" " * 1000

    reply = httpx.post(url + "/grade", content=chunks(), headers={"content-type": "application/json"}, timeout=30)
    assert reply.status_code == 413
    assert httpx.get(url + "/nowhere", timeout=30).status_code == 404
    assert httpx.get(url + "/grade", timeout=30).status_code == 405
    health = httpx.get(url + "/healthz", timeout=30).json()
    assert health["status"] == "ok" and health["limits"]["max_pairs"] == 16
    metrics = httpx.get(url + "/metrics", timeout=30).text
    assert 'path="/grade",status="200"' in metrics and "headcut_pairs_total" in metrics


# Issue 12, defect 14: the server refuses what the CLI refuses, and /metrics stays bounded.

@pytest.mark.parametrize("path, body, where", [
    ("/rank", {"query": "drill", "titles": [""]}, "titles.0"),
    ("/rank", {"query": "drill", "titles": ["cordless drill", "   "]}, "titles.1"),
    ("/rank", {"query": "drill", "titles": ["a\u0000b"]}, "titles.0"),
    ("/rank", {"query": " \t ", "titles": ["cordless drill"]}, "query"),
    ("/grade", {"pairs": [{"query": "   ", "title": "cordless drill"}]}, "pairs.0.query"),
    ("/grade", {"pairs": [{"query": "drill", "title": "\n"}]}, "pairs.0.title"),
    ("/grade", {"pairs": [{"query": "dr\u0007ill", "title": "cordless drill"}]}, "pairs.0.query"),
])
def test_blank_or_control_texts_are_refused_like_the_cli(server, path, body, where):
    reply = httpx.post(server[0] + path, json=body, timeout=30)
    assert reply.status_code == 422, reply.text
    assert where in reply.json()["error"]


def test_metrics_do_not_grow_with_unknown_paths(server):
    import uuid

    url, _ = server

    def series():
        # one worker answers each request, so read each worker's page until both were seen
        pages = {}
        for _ in range(40):
            text = httpx.get(url + "/metrics", timeout=30).text
            pid = next(line for line in text.splitlines() if line.startswith("headcut_worker_pid"))
            pages[pid] = [line for line in text.splitlines() if line.startswith("headcut_requests_total")]
            if len(pages) == 2:
                break
        return max(len(lines) for lines in pages.values()), pages

    with httpx.Client(timeout=30) as client:
        for _ in range(3):
            client.get(f"{url}/{uuid.uuid4().hex}")  # every worker has seen an unknown path at least once, likely
        before, _ = series()
        for _ in range(60):
            assert client.get(f"{url}/{uuid.uuid4().hex}/x").status_code == 404
    after, pages = series()
    assert after <= before + 1, pages  # at most one new series: the bucket for unknown paths
    assert all(not any("/x" in line for line in lines) for lines in pages.values())
