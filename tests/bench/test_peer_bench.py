"""The peer bench's pure logic: who goes first, per-round ratios, targets, repeat check."""

import json

from bench.peer_bench import (
    CASES,
    add_cpu_ratio,
    check_targets,
    compare_previous,
    first_side,
    median_ratio,
    print_table,
    relative_change,
    slice_counts,
    slice_order,
    summarize,
    target_met,
)


def test_first_side_alternates_by_round_and_by_case() -> None:
    for case_index in range(len(CASES)):
        order = [first_side(r, case_index) for r in range(1, 5)]
        assert order[0] != order[1] and order[0] == order[2] and order[1] == order[3]
    assert first_side(1, 0) != first_side(1, 1)
    assert {first_side(1, 0), first_side(2, 0)} == {"ours", "tansu"}


def test_slices_alternate_and_add_up() -> None:
    assert [slice_order("ours", j) for j in range(3)] == [
        ("ours", "tansu"),
        ("tansu", "ours"),
        ("ours", "tansu"),
    ]
    assert slice_order("tansu", 0) == ("tansu", "ours")
    assert slice_counts(1_000_000, 2) == [500_000, 500_000]
    assert slice_counts(10, 3) == [4, 3, 3]


def test_median_ratio_pairs_rounds() -> None:
    # the median of the per-round ratios, not the ratio of the medians (200/300 here)
    ratio, per_round = median_ratio([100.0, 300.0, 200.0], [50.0, 300.0, 400.0])
    assert per_round == [2.0, 1.0, 0.5]
    assert ratio == 1.0
    ratio, _ = median_ratio([120.0, 130.0, 140.0], [100.0, 100.0, 100.0])
    assert ratio == 1.3


def test_target_met_both_directions() -> None:
    assert target_met(1.3, ">=", 1.3) and not target_met(1.29, ">=", 1.3)
    assert target_met(2.0, "<=", 2.0) and not target_met(2.01, "<=", 2.0)


def test_relative_change() -> None:
    assert abs(relative_change(1.0, 1.1) - 0.1) < 1e-9
    assert relative_change(2.0, 1.0) == -0.5


def _phase(msg_per_s: int, cpu_per_m: float, other: float = 0.0) -> dict:
    return {"msg_per_s": msg_per_s, "mb_per_s": msg_per_s / 1e6, "other_cpu_cores": other,
            "broker_cpu_s_per_million": cpu_per_m}  # fmt: skip


def _round(no: int, ours: int, tansu: int, cpu: float) -> dict:
    def side(m: int, c: float) -> dict:
        return {"produce": _phase(m, c), "consume": _phase(m, c)}

    return {"round": no, "ours": side(ours, cpu), "tansu": side(tansu, 1.0)}


def test_report_from_rounds(tmp_path, capsys) -> None:
    """Summaries, RF 3/RF 1 CPU, targets and the repeat check from made-up rounds."""
    rf1 = [_round(1, 130, 100, 2.0), _round(2, 140, 100, 2.0), _round(3, 120, 100, 2.0)]
    rf3 = [_round(1, 80, 100, 5.0), _round(2, 70, 100, 3.0), _round(3, 90, 100, 4.0)]
    summaries = {
        "1kib_rf1": summarize(CASES["1kib_rf1"], 3, rf1),
        "1kib_rf3": summarize(CASES["1kib_rf3"], 3, rf3),
    }
    add_cpu_ratio(summaries)
    assert summaries["1kib_rf1"]["produce_ratio"] == 1.3
    assert summaries["1kib_rf3"]["produce_ratio_rounds"] == [0.8, 0.7, 0.9]
    assert summaries["1kib_rf3"]["cpu_rf3_over_rf1"] == 2.0  # median of 2.5, 1.5, 2.0
    print_table(summaries)
    met = {(t["case"], t["figure"]): t["met"] for t in check_targets(summaries)}
    assert met == {
        ("1kib_rf3", "produce"): True,
        ("1kib_rf1", "produce"): True,
        ("1kib_rf1", "consume"): True,
        ("1kib_rf3", "cpu_rf3_over_rf1"): True,
    }
    prev = tmp_path / "peer.json"
    prev.write_text(json.dumps({"date": "d", "git_commit": "c", "results": [
        {"case": "1kib_rf1", "produce_ratio": 1.0, "consume_ratio": 1.3}]}))  # fmt: skip
    repeat = compare_previous(prev, summaries)
    assert repeat is not None and repeat["largest_change"] == 0.3
    assert not repeat["within_tolerance"]
    assert "not checked" in capsys.readouterr().out  # the 100 B targets: case not run
