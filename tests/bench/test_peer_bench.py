"""The peer bench's pure logic: who goes first, per-round ratios, targets, repeat check."""

from bench.peer_bench import CASES, first_side, median_ratio, relative_change, target_met


def test_first_side_alternates_by_round_and_by_case() -> None:
    for case_index in range(len(CASES)):
        order = [first_side(r, case_index) for r in range(1, 5)]
        assert order[0] != order[1] and order[0] == order[2] and order[1] == order[3]
    assert first_side(1, 0) != first_side(1, 1)
    assert {first_side(1, 0), first_side(2, 0)} == {"ours", "tansu"}


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
