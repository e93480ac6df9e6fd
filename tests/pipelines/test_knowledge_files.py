from __future__ import annotations

from pipelines.knowledge_files import included_pages


class TestIncludedPages:
    def test_a_page_that_another_page_includes_is_shown_by_it(self):
        includes = {"book/build.md": ["book/arg-watcher.md", "_common/brew.md"], "book/arg-watcher.md": []}
        assert included_pages(includes) == {"book/arg-watcher.md": "book/build.md"}

    def test_pages_that_only_include_each_other_stay_pages(self):
        assert included_pages({"a.md": ["b.md"], "b.md": ["a.md"]}) == {}
        assert included_pages({"a.md": ["a.md"]}) == {}  # a page including itself

    def test_nested_includes_and_several_includers(self):
        # the converter lists a page's includes' includes too: x includes y, which includes z
        includes = {"x.md": ["y.md", "z.md"], "w.md": ["z.md"], "y.md": ["z.md"], "z.md": []}
        assert included_pages(includes) == {"y.md": "x.md", "z.md": "w.md"}

    def test_an_included_file_of_another_kind_is_shown_by_its_page_too(self):
        # Sphinx: a page's `{literalinclude} example.txt` shows the text file, which is a knowledge file too
        includes = {"syntax/page.md": ["syntax/example.txt", "conf.py"]}
        files = {"syntax/page.md", "syntax/example.txt"}
        assert included_pages(includes, files) == {"syntax/example.txt": "syntax/page.md"}

    def test_no_pages(self):
        assert included_pages({}) == {}
