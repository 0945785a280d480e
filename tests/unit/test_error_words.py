"""Errors a person reads, in words: the adapters' translations of Docker's host-port
clash and of a refused TCP connect (issue 15, item 6)."""

from __future__ import annotations

import pytest
from berth.adapters.docker.runtime import port_clash
from berth.adapters.ssh.gateway import connect_failure
from berth.core.types import RuleError, check_env_key
from berth.entrypoints.http.dashboard.web import prose

ENDPOINT = (
    "driver failed programming external connectivity on endpoint shop "
    "(4b1f0c9e2d7a8f3e6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170605): "
)


class TestPortClash:
    def test_a_process_holding_the_port_is_named_without_the_endpoint_hash(self) -> None:
        """Docker's userland-proxy text becomes "Port N is already in use on this server"."""
        text = ENDPOINT + (
            "Error starting userland proxy: listen tcp4 0.0.0.0:8091: bind: address already in use"
        )
        said = port_clash(text)
        assert said is not None
        assert said.startswith("Port 8091 is already in use on this server")
        assert "0.0.0.0:8091" in said
        assert "4b1f0c9e" not in said
        assert "endpoint" not in said

    def test_another_container_holding_the_port_is_named(self) -> None:
        """Docker's "port is already allocated" says another container holds it."""
        said = port_clash(ENDPOINT + "Bind for 0.0.0.0:8080 failed: port is already allocated")
        assert said is not None
        assert said.startswith("Port 8080 is already in use on this server")
        assert "another container" in said

    def test_other_texts_are_left_to_docker(self) -> None:
        """Any other refusal is not a port clash."""
        assert port_clash("No such image: shop:1.0") is None


class TestConnectFailure:
    def test_a_failed_connect_is_a_sentence_that_does_not_say_why(self) -> None:
        """Refused, timed out or not SSH: the same sentence, naming the address and port
        but not the cause (else a server's address would be a port scanner)."""
        assert connect_failure("127.0.0.1", 1) == (
            "berth could not reach 127.0.0.1 on port 1 over SSH (unreachable: check the "
            "address, the SSH port and any firewall between)."
        )
        assert "refused" not in connect_failure("203.0.113.9", 22)


class TestEnvKeyRule:
    @pytest.mark.parametrize("key", ["1ABC", "A-B", "A B", "É"])
    def test_the_env_name_rule_is_said_in_words(self, key: str) -> None:
        """A bad variable name is explained in words, not with a regular expression."""
        with pytest.raises(RuleError) as refused:
            check_env_key(key)
        message = str(refused.value)
        assert "^" not in message
        assert "[" not in message
        assert "letter" in message


class TestProse:
    def test_code_spans_become_code_and_type_words_go(self) -> None:
        """`x` is shown as <code>x</code>; ", got a string." is dropped."""
        said = prose("Use `nginx:1.27`: expected an integer, got a string.")
        assert str(said) == "Use <code>nginx:1.27</code>: expected an integer."

    @pytest.mark.parametrize(
        "text",
        ["`<script>alert(1)</script>`", "<img src=x onerror=alert(1)>", "`\"&'`"],
    )
    def test_hostile_text_stays_escaped(self, text: str) -> None:
        """Whatever a message quotes, only berth's <code> tags are markup."""
        said = str(prose(text))
        assert "<script" not in said
        assert "<img" not in said
        assert said.replace("<code>", "").replace("</code>", "").count("<") == 0
