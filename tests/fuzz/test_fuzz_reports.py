"""Fuzzing `iogen report` and `iogen compare` inputs: mutated summary.json and campaign.json files
(byte-level and JSON-level) give a report, a comparison, or exit 2 naming the file; never a
traceback. Budget and replay as in test_fuzz_data (IOGEN_FUZZ_ITERATIONS, IOGEN_FUZZ_SEED)."""
import json
import os

import numpy as np
import pytest

from ..report.conftest import make_campaign, make_run
from .test_fuzz_data import ITERATIONS, SEED, mutate

JSON_VALUES = [None, [], {}, "x", -1, 1e308, True, [[[]]], {"a": None}]


def _json_mutation(rng, doc):
    """Replace one value somewhere in the document with a value of another kind."""
    paths = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append(path + [k])
                walk(v, path + [k])
        elif isinstance(node, list) and node:
            paths.append(path + [0])
            walk(node[0], path + [0])

    walk(doc, [])
    path = paths[int(rng.integers(0, len(paths)))]
    value = JSON_VALUES[int(rng.integers(0, len(JSON_VALUES)))]
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return doc, f"{'.'.join(map(str, path))} = {value!r}"


@pytest.mark.parametrize("target", ["summary", "campaign"])
def test_mutated_run_folders_are_reported_or_refused_with_exit_2(tmp_path, capsys, target):
    from iogen.cli.entry import main

    camp = make_campaign(str(tmp_path), "camp", [100.0, 101.0], warmup=0)
    good = make_run(str(tmp_path), "good", "good")
    victim = os.path.join(camp, "w-run-1", "summary.json") if target == "summary" else \
        os.path.join(camp, "campaign.json")
    with open(victim, "rb") as fh:
        original = fh.read()
    rng = np.random.default_rng([SEED, 7, len(target)])
    for it in range(ITERATIONS):
        if it % 2:
            data, what = mutate(rng, original)
        else:
            doc, what = _json_mutation(rng, json.loads(original))
            data = json.dumps(doc).encode()
        with open(victim, "wb") as fh:
            fh.write(data)
        where = f"seed {SEED}, iteration {it}, {target}: {what}"
        for args in (["report", camp, "--no-html", "-o", str(tmp_path / "rep")], ["compare", good, camp]):
            try:
                code = main(args)
            except Exception as exc:  # noqa: BLE001 - the defect this harness exists to find
                raise AssertionError(f"iogen {args[0]} raised {type(exc).__name__}: {exc} ({where})") from exc
            err = capsys.readouterr().err
            assert code in (0, 1, 2), f"exit {code} ({where}): {err[-500:]}"
            assert "Traceback" not in err, f"traceback ({where}): {err[-2000:]}"
            if code == 2:
                assert err.startswith("iogen: error:"), f"no message ({where}): {err[-300:]}"
