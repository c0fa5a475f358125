"""The Data Docs' page views: Great Expectations' own, with their Jinja templates compiled
once per process.

GX gives each page it renders a Jinja environment of its own, and each environment
compiles the templates it uses again: 24 compilations for a run's Data Docs, which took
0.30-0.34 s of a ``mirror`` task's CPU (0.09-0.12 s with them compiled). Here the
environments share a bytecode cache (Jinja's own mechanism: a template whose source is
unchanged is loaded from its compiled code). :func:`compile_templates` fills it;
mirrorflow.airflow.preload calls it, so that every task process forked after inherits the
compiled code.
"""

from __future__ import annotations

import jinja2

from mirrorflow.quality.gx_import import import_gx

import_gx()
from great_expectations.render.view import (  # noqa: E402
    DefaultJinjaIndexPageView,
    DefaultJinjaPageView,
)


class CompiledTemplates(jinja2.BytecodeCache):
    """Compiled templates in memory, by Jinja's key (template name and file); Jinja checks
    each against its template's source before it uses it."""

    def __init__(self) -> None:
        self.code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if bucket.key in self.code:
            bucket.bytecode_from_string(self.code[bucket.key])

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self.code[bucket.key] = bucket.bytecode_to_string()


TEMPLATES = CompiledTemplates()


class _Compiled:
    """A GX view whose Jinja environment uses :data:`TEMPLATES`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.env.bytecode_cache = TEMPLATES


class PageView(_Compiled, DefaultJinjaPageView):
    """The page of a suite or of a validation result."""


class IndexPageView(_Compiled, DefaultJinjaIndexPageView):
    """The site's index page."""


def compile_templates() -> int:
    """Compile every template of the views into :data:`TEMPLATES`; how many there are."""
    env = PageView().env
    names = env.list_templates(extensions=["j2", "css"])
    for name in names:
        env.get_template(name)
    return len(names)
