"""The OpenAPI document's defaults: ``default: null`` only where ``null`` is allowed
(a generator such as openapi-typescript otherwise makes the field required)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from berth.entrypoints.http import create_app
from berth.entrypoints.settings import Settings
from litestar.testing import TestClient
from wiring import build_app

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the dashboard's


def _allows_null(schema: Any, components: dict[str, Any]) -> bool:
    if not isinstance(schema, dict):
        return False
    if "$ref" in schema:
        return _allows_null(components[schema["$ref"].rsplit("/", 1)[1]], components)
    kinds = schema.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    return any(_allows_null(s, components) for k in ("anyOf", "oneOf") for s in schema.get(k, []))


def _null_defaults(node: Any, components: dict[str, Any], at: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        if node.get("default", 0) is None:
            schema = node.get("schema", node)  # a parameter's default sits beside its schema
            if not _allows_null(schema, components):
                yield at
        for key, value in node.items():
            yield from _null_defaults(value, components, f"{at}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _null_defaults(value, components, f"{at}/{i}")


def test_no_default_null_where_null_is_not_allowed() -> None:
    """Every ``default: null`` in the document is on a schema that allows null."""
    with TestClient(create_app(build_app().bus, Settings())) as client:
        document = client.get("/api/agent/openapi.json").json()
    components = document["components"]["schemas"]
    assert list(_null_defaults(document, components)) == []
    assert list(_null_defaults({"a": {"type": "integer", "default": None}}, {})) == ["/a"]


def test_each_controllers_handlers_have_names_of_their_own() -> None:
    """Litestar orders a controller's handlers by name, then by their objects' addresses:
    three handlers named alike (stop, start, restart) put the OpenAPI document's paths in
    a different order in each process, so its bytes (and ETag) differed between replicas."""
    import importlib
    import pkgutil

    from berth.entrypoints.http import controllers
    from litestar import Controller
    from litestar.handlers import BaseRouteHandler

    seen = 0
    for module in pkgutil.iter_modules(controllers.__path__):
        loaded = importlib.import_module(f"{controllers.__name__}.{module.name}")
        for cls in vars(loaded).values():
            if not (isinstance(cls, type) and issubclass(cls, Controller)) or cls is Controller:
                continue
            names = [
                str(handler)
                for handler in vars(cls).values()
                if isinstance(handler, BaseRouteHandler)
            ]
            seen += len(names)
            assert len(names) == len(set(names)), (cls.__name__, sorted(names))
    assert seen > 20
