"""The read settings and the read-your-writes token, without a database."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.errors import BadRequest
from app.settings import Settings
from app.web.reads import parse_min_position


class TestReadDatabaseUrl:
    def test_several_urls_are_split_on_commas_but_a_host_list_is_one_url(self) -> None:
        settings = Settings(
            _env_file=None,
            read_database_url="postgresql://r1/db, postgresql://u@/db?host=a,b&port=5432,5433",
        )
        assert settings.read_database_urls == [
            "postgresql://r1/db",
            "postgresql://u@/db?host=a,b&port=5432,5433",
        ]

    def test_unset_or_blank_means_no_replica(self) -> None:
        assert Settings(_env_file=None).read_database_urls == []
        assert Settings(_env_file=None, read_database_url=" ").read_database_urls == []

    def test_a_url_that_is_not_postgresql_is_refused_at_start(self) -> None:
        with pytest.raises(ValidationError, match="must be a postgresql:// URL"):
            Settings(_env_file=None, read_database_url="postgresql://r1/db,mysql://r2/db")


class TestMinPosition:
    def test_a_position_or_nothing(self) -> None:
        assert parse_min_position("42") == 42
        assert parse_min_position(None) is None
        assert parse_min_position("") is None

    # "²" is a digit to str.isdigit but not to int; int refuses past 4,300 digits: each
    # was a 500 from GraphQL's context before it was a BadRequest.
    @pytest.mark.parametrize(
        "text", ["-1", "x", "1.5", "99999999999999999999999", "\u00b2", "1" * 5000]
    )
    def test_anything_else_is_a_bad_request(self, text: str) -> None:
        with pytest.raises(BadRequest, match="Causeway-Min-Position"):
            parse_min_position(text)
