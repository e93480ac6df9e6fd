from __future__ import annotations

import pytest

from components.core.access import ALL_GROUPS, access_groups, can_read, reader_groups


class TestAccess:
    @pytest.mark.parametrize(
        ("value", "groups"),
        [
            (None, []),
            ("Finance", ["finance"]),
            ("finance, HR ,", ["finance", "hr"]),
            (["a", "A", 7, True, None, {"x": 1}], ["a", "7"]),
            ([], []),
        ],
    )
    def test_access_groups_of_a_front_matter_value(self, value, groups):
        assert access_groups(value) == groups

    def test_a_public_page_is_read_by_everyone_a_restricted_one_by_its_groups(self):
        assert can_read([], reader_groups(None))
        assert not can_read(["finance"], reader_groups(None))  # no identity: public pages only
        assert not can_read(["finance"], reader_groups(["hr", ""]))
        assert can_read(["finance", "hr"], reader_groups([" HR "]))
        assert can_read(["finance"], reader_groups([ALL_GROUPS]))
        assert not can_read([ALL_GROUPS], reader_groups(["finance"]))  # a page closed to all but `*` holders
