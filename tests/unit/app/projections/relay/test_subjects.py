"""Subjects: what a subscriber writes to get a tenant's events of a type prefix."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.projections.relay.subjects import (
    Tenants,
    decode_token,
    encode_token,
    msg_id,
    position_of,
    subject_for,
)


class TestSubjectFor:
    def test_the_type_s_dots_become_tokens_under_the_tenant(self) -> None:
        assert subject_for("acme", "com.example.frame.v1") == "causeway.acme.com.example.frame.v1"

    def test_a_dotted_tenant_stays_one_token(self) -> None:
        assert subject_for("acme.eu", "t") == "causeway.acme%2Eeu.t"

    @pytest.mark.parametrize(
        ("event_type", "subject"),
        [
            ("a b", "causeway.t.a%20b"),
            ("a*.>", "causeway.t.a%2A.%3E"),
            ("100%", "causeway.t.100%25"),
            ("caf\u00e9", "causeway.t.caf%C3%A9"),
            ("a..b", "causeway.t.a.%00.b"),
            (".a", "causeway.t.%00.a"),
            ("tab\there", "causeway.t.tab%09here"),
        ],
    )
    def test_what_nats_refuses_in_a_token_is_percent_encoded(
        self, event_type: str, subject: str
    ) -> None:
        assert subject_for("t", event_type) == subject

    @given(st.text(alphabet=st.characters(exclude_characters="\x00", codec="utf-8")))
    def test_every_token_is_legal_and_decodes_to_what_was_encoded(self, text: str) -> None:
        token = encode_token(text)
        assert token
        assert not any(c in token for c in " \t\r\n\f.*>")
        assert decode_token(token) == text


class TestMsgId:
    def test_names_the_tenant_and_the_position(self) -> None:
        assert msg_id("acme", 42) == "acme:42"
        assert position_of("acme.eu:42") == 42

    @pytest.mark.parametrize("other", [None, "", "abc", "acme:", "acme:x1"])
    def test_another_publisher_s_id_has_no_position(self, other: str | None) -> None:
        assert position_of(other) is None


class TestTenants:
    def test_unset_relays_every_tenant(self) -> None:
        assert Tenants.parse(None).includes("acme")
        assert Tenants.parse(" ").describe() == "every tenant"

    def test_a_list_relays_only_those(self) -> None:
        chosen = Tenants.parse("acme, globex")
        assert chosen.includes("acme")
        assert not chosen.includes("initech")
        assert chosen.describe() == "only acme, globex"

    def test_minus_leaves_tenants_out(self) -> None:
        chosen = Tenants.parse("-test,-internal")
        assert not chosen.includes("test")
        assert chosen.includes("acme")
        assert chosen.describe() == "every tenant but internal, test"
