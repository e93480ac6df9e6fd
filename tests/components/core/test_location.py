from __future__ import annotations

import pytest

from components.core.location import file_line, moved_line_map


class TestFileLine:
    def test_lines_follow_their_segment(self):
        line_map = [[0, 1, 1], [3, 10, 0], [6, 4, 1]]  # lines 3-5 stand for line 10 (an include), then on from 4
        assert [file_line(line_map, n) for n in range(8)] == [1, 2, 3, 10, 10, 10, 4, 5]

    def test_an_empty_map_reads_as_the_lines_themselves(self):
        assert file_line([], 4) == 5


class TestMovedLineMap:
    @pytest.mark.parametrize(
        ("line_map", "origins"),
        [
            ([[0, 1, 1]], [0, 1, 2, 6, 10, 14, 16, 17]),
            ([[0, 1, 1], [3, 10, 0], [6, 4, 1]], [0, 2, 3, 5, 6, 7]),
            ([[0, 7, 1]], []),
        ],
    )
    def test_every_line_keeps_the_file_line_of_the_line_it_was(self, line_map, origins):
        moved = moved_line_map(line_map, origins)
        assert [file_line(moved, n) for n in range(len(origins))] == [file_line(line_map, o) for o in origins]

    def test_runs_that_follow_each_other_in_the_file_are_one_segment(self):
        assert moved_line_map([[0, 1, 1]], [0, 1, 2, 6, 10, 11]) == [[0, 1, 1], [3, 7, 1], [4, 11, 1]]

    def test_lines_that_all_stand_for_one_line_are_one_segment(self):
        # an included file's lines at its directive (line 4), then the page goes on from line 5
        origins = [0, 1, 2, 3, 3, 3, 3, 4, 4]
        moved = moved_line_map([[0, 1, 1]], origins)
        assert moved == [[0, 1, 1], [4, 4, 0], [7, 5, 0]]
        assert [file_line(moved, n) for n in range(len(origins))] == [o + 1 for o in origins]

    def test_the_input_map_is_not_changed(self):
        line_map = [[0, 1, 1], [2, 9, 0]]
        moved_line_map(line_map, [0, 2, 3])
        assert line_map == [[0, 1, 1], [2, 9, 0]]
