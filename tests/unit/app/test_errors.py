"""The error tree in ``app.errors``' docstring is the one a reader trusts: it names every
error class with its status and problem code."""

from __future__ import annotations

import re

import app.errors
from app.errors import Forbidden, error_classes
from app.store.keys import Scope


def test_the_docstring_tree_names_every_error_with_its_status_and_code() -> None:
    documented = {
        name: (int(status), code)
        for name, status, code in re.findall(
            r"^[\s│├└─]*(\w+)\s+(\d{3})\s+([a-z-]+)$", app.errors.__doc__ or "", re.MULTILINE
        )
    }
    actual = {cls.__name__: (cls.status, cls.code) for cls in error_classes()}
    assert documented == actual


def test_the_forbidden_problem_names_every_scope_a_key_can_lack() -> None:
    """The page a 403 links to: a worker key's holder learns what ``worker`` is."""
    assert all(scope.value in Forbidden.about for scope in Scope)
