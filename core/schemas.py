"""JSON Schema validation with each schema checked and compiled once per process.

``jsonschema.validate`` checks the schema against its metaschema on every call, which cost a
resume more than all its database reads together (a tool's schema is validated twice per
decision: on the decision path and again in the graph's gate). This is the same check with the
same errors (``SchemaError`` for a bad schema, the best-matching ``ValidationError``), the
checked validator kept per distinct schema.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any


def validate(instance: Any, schema: Any) -> None:
    """``jsonschema.validate(instance, schema)``, with the schema's check and compilation
    cached (a schema that cannot be written as JSON is checked every time, as before)."""
    import jsonschema

    try:
        key = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):
        jsonschema.validate(instance, schema)
        return
    error = jsonschema.exceptions.best_match(_validator(key).iter_errors(instance))
    if error is not None:
        raise error


@lru_cache(maxsize=256)
def _validator(key: str) -> Any:
    import jsonschema

    schema = json.loads(key)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)  # raises SchemaError, as jsonschema.validate does (not cached)
    return cls(schema)
