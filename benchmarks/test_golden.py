"""benchmarks/golden.py's sampling of a sweep grid."""
from __future__ import annotations

import pytest

from benchmarks.golden import main, sample

GRID = [[f"x={i}"] for i in range(7)]


@pytest.mark.parametrize("n, picks", [(1, [0]), (2, [0, 6]), (3, [0, 3, 6]), (7, list(range(7))),
                                      (9, list(range(7)))])
def test_sample_spreads_n_points_first_and_last_included(n, picks):
    assert sample(GRID, n) == [GRID[i] for i in picks]


def test_fewer_than_one_point_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["record", str(tmp_path), "--points", "0"])
    assert "--points 0: must be at least 1" in capsys.readouterr().err
