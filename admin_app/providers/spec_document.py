"""A pulled spec's bytes read as an OpenAPI document: JSON, else YAML; the root an object.

YAML is read with PyYAML's safe loader and three changes that keep the result plain JSON: a
document may use at most SPEC_YAML_MAX_ALIASES aliases (an alias repeats a node without its
bytes, so a few of them can stand for a document far larger than the 5 MiB that were read);
timestamps stay the text they are written as (JSON has no dates); and the tree is then copied as
JSON, keys as text, which also refuses what JSON cannot hold (a cycle, binary data, NaN, NUL)
and a tree that would be larger, once written out, than a pulled document may be.
"""
from __future__ import annotations

import math
from typing import Any

import yaml

from .. import limits
from ..canonical import canonical_json
from ..validation import MAX_JSON_DEPTH, strict_json_loads

# The most values (objects, arrays, scalars) a YAML document may expand to, whatever aliases
# repeat: more than a real 5 MiB OpenAPI document holds, few enough to copy in a moment.
MAX_VALUES = 1_000_000


class SpecInvalid(ValueError):
    """The bytes are not a document the hub takes; the message says why, for the operator."""


class _Loader(yaml.SafeLoader):
    """SafeLoader counting aliases, with timestamps left as text."""

    aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > limits.SPEC_YAML_MAX_ALIASES:
                raise SpecInvalid(f"the YAML uses more than {limits.SPEC_YAML_MAX_ALIASES} aliases")
        return super().compose_node(parent, index)


# Copied so that SafeLoader itself keeps its resolvers: without the timestamp one, a date is a str.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def parse(raw: bytes) -> dict[str, Any]:
    """The document, or SpecInvalid."""
    try:
        value = strict_json_loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        value = _yaml(raw)
    if not isinstance(value, dict):
        raise SpecInvalid("the document's root is not an object")
    version = value.get("openapi")
    if not isinstance(version, str) or not version.startswith("3."):
        raise SpecInvalid("the document is not OpenAPI 3.x (its `openapi` is not a 3.x version string)")
    if not isinstance(value.get("paths"), dict):
        raise SpecInvalid("the document's `paths` is not an object")
    return value


def _yaml(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecInvalid("the document is neither JSON nor UTF-8 YAML") from None
    loader = _Loader(text)
    try:
        tree = loader.get_single_data()
    except SpecInvalid:
        raise
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise SpecInvalid(f"the document is neither JSON nor valid YAML{where}") from None
    except RecursionError:
        raise SpecInvalid(f"the document is nested deeper than {MAX_JSON_DEPTH} levels") from None
    finally:
        loader.dispose()
    value = _as_json(tree)
    # Stored as compact JSON: expanded aliases must not make that larger than a pull may be.
    if len(canonical_json(value).encode("utf-8")) > limits.SPEC_PULL_MAX_BYTES:
        raise SpecInvalid(f"the document, as JSON, is larger than {limits.SPEC_PULL_MAX_BYTES} bytes")
    return value


def _key(key: Any) -> str:
    """A mapping key as JSON text names it (YAML allows any scalar as a key)."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, (str, int, float)):
        return _text(str(key))
    raise SpecInvalid("the YAML has a mapping key that is not a scalar")


def _text(value: str) -> str:
    if "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise SpecInvalid("the document holds text with NUL or an unpaired surrogate")
    return value


def _as_json(tree: Any) -> Any:
    """A copy of the loaded YAML as plain JSON values; iterative, counting every value copied."""
    budget = [MAX_VALUES]

    def leaf(value: Any) -> Any:
        if isinstance(value, str):
            return _text(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecInvalid("the document holds a number that is not finite (.nan or .inf)")
        if value is None or isinstance(value, (bool, int, float)):
            return value
        raise SpecInvalid(f"the document holds a YAML {type(value).__name__} value, which JSON has no form for")

    def container(value: Any) -> Any:
        return {} if isinstance(value, dict) else []

    if not isinstance(tree, (dict, list)):
        return leaf(tree)
    root = container(tree)
    # (source, copy, depth, ids of the containers above it, for cycles)
    stack: list[tuple[Any, Any, int, frozenset[int]]] = [(tree, root, 1, frozenset({id(tree)}))]
    while stack:
        source, copy, depth, above = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise SpecInvalid(f"the document is nested deeper than {MAX_JSON_DEPTH} levels")
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, child in items:
            budget[0] -= 1
            if budget[0] < 0:
                raise SpecInvalid(f"the document expands to more than {MAX_VALUES} values")
            if isinstance(child, (dict, list)):
                if id(child) in above:
                    raise SpecInvalid("the YAML refers to itself (an alias inside its own anchor)")
                made = container(child)
                stack.append((child, made, depth + 1, above | {id(child)}))
            else:
                made = leaf(child)
            if isinstance(copy, dict):
                copy[_key(key)] = made
            else:
                copy.append(made)
    return root
