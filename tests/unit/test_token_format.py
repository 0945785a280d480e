"""API token format: randomness, checksum, hashing, display prefix."""

from __future__ import annotations

import math
import re

from berth.core import tokens
from hypothesis import given
from hypothesis import strategies as st

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
FORMAT = re.compile(r"berth_[0-9A-Za-z]{43}[0-9A-Za-z]{6}")

token_st = st.builds(tokens.generate)  # fresh, really random tokens


class TestGenerate:
    def test_format(self) -> None:
        """A token is `berth_`, 43 random base62 characters and a 6-character checksum."""
        token = tokens.generate()
        assert FORMAT.fullmatch(token)
        assert tokens.is_well_formed(token)

    def test_random_part_carries_256_bits(self) -> None:
        """43 base62 characters hold at least 256 bits."""
        assert 43 * math.log2(62) >= 256

    def test_tokens_differ(self) -> None:
        """Two thousand tokens are all different, and use the whole alphabet."""
        many = [tokens.generate() for _ in range(2000)]
        assert len(set(many)) == len(many)
        used = set("".join(t[len(tokens.API_PREFIX) : len(tokens.API_PREFIX) + 43] for t in many))
        assert used == set(ALPHABET)

    def test_enrollment_tokens_are_not_api_tokens(self) -> None:
        """An enrollment token is well formed only with its own prefix."""
        enroll = tokens.generate(tokens.ENROLL_PREFIX)
        assert tokens.is_well_formed(enroll, tokens.ENROLL_PREFIX)
        assert not tokens.is_well_formed(enroll)
        assert not tokens.is_well_formed(tokens.generate(), tokens.ENROLL_PREFIX)


class TestWellFormed:
    @given(token_st, st.data())
    def test_any_single_character_change_is_rejected(self, token: str, data: st.DataObject) -> None:
        """Changing any one character of the body is caught by the checksum or the format."""
        i = data.draw(st.integers(0, len(token) - 1), label="position")
        chars = ALPHABET + "_-. \n"
        shift = data.draw(st.integers(1, len(chars) - 1), label="shift")
        c = chars[(chars.index(token[i]) + shift) % len(chars)]
        assert not tokens.is_well_formed(token[:i] + c + token[i + 1 :])

    @given(token_st, st.data())
    def test_truncation_is_rejected(self, token: str, data: st.DataObject) -> None:
        """Any proper prefix of a token is rejected."""
        n = data.draw(st.integers(0, len(token) - 1))
        assert not tokens.is_well_formed(token[:n])

    @given(token_st, st.text(min_size=1, max_size=5))
    def test_extension_is_rejected(self, token: str, suffix: str) -> None:
        """Anything appended, a newline included, makes a token malformed."""
        assert not tokens.is_well_formed(token + suffix)

    @given(token_st, st.data())
    def test_swapping_adjacent_characters_is_rejected(
        self, token: str, data: st.DataObject
    ) -> None:
        """Swapping two different adjacent body characters is caught (a common typo)."""
        start = len(tokens.API_PREFIX)
        i = data.draw(st.integers(start, len(token) - 2))
        swapped = token[:i] + token[i + 1] + token[i] + token[i + 2 :]
        if swapped != token:
            assert not tokens.is_well_formed(swapped)

    @given(st.text(max_size=80))
    def test_arbitrary_text_is_rejected_without_crashing(self, text: str) -> None:
        """Random text is (practically always) malformed, and never raises."""
        assert tokens.is_well_formed(text) is False


class TestHash:
    @given(token_st)
    def test_hash_is_stable_hex_sha256(self, token: str) -> None:
        """The stored hash is the same every time and is 64 hex digits."""
        assert tokens.hash_token(token) == tokens.hash_token(token)
        assert re.fullmatch(r"[0-9a-f]{64}", tokens.hash_token(token))

    def test_hashes_differ_between_tokens(self) -> None:
        """Different tokens hash differently."""
        assert tokens.hash_token(tokens.generate()) != tokens.hash_token(tokens.generate())

    def test_same_hash_compares(self) -> None:
        """same_hash is equality of hashes."""
        h = tokens.hash_token(tokens.generate())
        assert tokens.same_hash(h, h)
        assert not tokens.same_hash(h, tokens.hash_token(tokens.generate()))


class TestDisplayPrefix:
    @given(token_st)
    def test_display_prefix_is_short(self, token: str) -> None:
        """The shown prefix is `berth_` plus four characters: far too little to guess from."""
        shown = tokens.display_prefix(token)
        assert token.startswith(shown)
        assert len(shown) == len(tokens.API_PREFIX) + 4
