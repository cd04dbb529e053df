"""The routes of `vtx serve` and their fields, declared once: the server registers its routes
from them (`vtx.serve.app.ROUTES`), reads and checks each request's fields by them
(`vtx.serve.libre.read_value`, `vtx.serve.requests.check_body`), and GET /spec writes them out
as a Swagger 2.0 document, the shape of LibreTranslate's own /spec.

A field's kind is its JSON type's name as a refusal says it (`vtx.serve.requests.check_field`).
"""

from __future__ import annotations

import dataclasses

# Where a field is read: "form", LibreTranslate's `request.values` (the query string, a form or
# a JSON body: Swagger's formData); "json", a field of a JSON body's object (Swagger's body);
# "path", a part of the route's path ({name}).
WHERE = ("form", "json", "path")

# Each kind's JSON Schema (Swagger 2.0 has no oneOf: a text or a list of them says it in words).
SCHEMAS = {
    "a string": {"type": "string"},
    "an integer": {"type": "integer"},
    "a number": {"type": "number"},
    "a boolean": {"type": "boolean"},
    "a list of strings": {"type": "array", "items": {"type": "string"}},
    "a list of lists of strings": {"type": "array", "items": {
        "type": "array", "items": {"type": "string"}}},
    "a list of [source, target] pairs": {"type": "array", "items": {
        "type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2}},
    "a string or a list of strings": {"type": "string"},
    "a file": {"type": "file"},  # a multipart form's part
}
ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}


@dataclasses.dataclass(frozen=True)
class Field:
    """A request's field as its route reads it and the spec says it."""

    name: str
    kind: str  # one of SCHEMAS
    description: str
    required: bool = False  # a request without it gets 400
    where: str = "form"  # one of WHERE
    default: object = None  # what an absent field is taken for (None: nothing said)
    choices: tuple = ()  # the values it may take (none: any of its kind)

    def __post_init__(self) -> None:
        if self.kind not in SCHEMAS or self.where not in WHERE:
            raise ValueError(f"field {self.name!r}: kind {self.kind!r} or where {self.where!r} "
                             f"is not one of {list(SCHEMAS)}, {list(WHERE)}")


@dataclasses.dataclass(frozen=True)
class Route:
    """A route of the server: its method and path, what it does and answers, its fields."""

    method: str
    path: str
    summary: str
    answer: str  # what a 200 holds
    fields: tuple[Field, ...] = ()
    tag: str = "vtx"  # "libretranslate": a route of LibreTranslate's API
    produces: str = "application/json"

    def field(self, name: str) -> Field:
        return next(field for field in self.fields if field.name == name)

    def names(self) -> tuple[str, ...]:
        return tuple(field.name for field in self.fields)


def swagger(routes: tuple[Route, ...], version: str) -> dict:
    """The Swagger 2.0 document of `routes` (GET /spec)."""
    paths: dict = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    return {"swagger": "2.0",
            "info": {"title": "vtx", "version": version,
                     "description": "Transformer translation: vtx's API under /v1 and "
                                    "LibreTranslate's."},
            "basePath": "/", "paths": paths, "definitions": {"error-response": ERROR}}


def _operation(route: Route) -> dict:
    form = [field for field in route.fields if field.where == "form"]
    body = [field for field in route.fields if field.where == "json"]
    parameters = [{"in": "path", "name": field.name, "required": True, "type": "string",
                   "description": field.description}
                  for field in route.fields if field.where == "path"]
    parameters += [_form_parameter(field) for field in form]
    if body:
        parameters.append({"in": "body", "name": "body", "required": True, "schema": {
            "type": "object", "additionalProperties": False,
            "properties": {field.name: _schema(field) for field in body},
            "required": [field.name for field in body if field.required]}})
    operation = {"summary": route.summary, "tags": [route.tag], "produces": [route.produces],
                 "parameters": parameters,
                 "responses": {"200": {"description": route.answer},
                               "default": {"description": "a refusal: 4xx, or 503 and "
                                                          "Retry-After",
                                           "schema": {"$ref": "#/definitions/error-response"}}}}
    if body:
        operation["consumes"] = ["application/json"]
    elif any(field.kind == "a file" for field in form):
        operation["consumes"] = ["multipart/form-data"]
    elif form:
        operation["consumes"] = ["application/x-www-form-urlencoded", "multipart/form-data",
                                 "application/json"]
    return operation


def _schema(field: Field) -> dict:
    schema = {**SCHEMAS[field.kind], "description": field.description}
    if field.default is not None:
        schema["default"] = field.default
    if field.choices:
        schema["enum"] = list(field.choices)
    return schema


def _form_parameter(field: Field) -> dict:
    """A formData parameter: a form sends a list as JSON text (a text or a list of them: the
    text)."""
    schema = _schema(field)
    if schema["type"] == "file":
        return {"in": "formData", "name": field.name, "required": field.required, **schema}
    if schema["type"] == "array":
        schema = {key: value for key, value in schema.items()
                  if key in ("description", "default", "enum")}
    return {"in": "formData", "name": field.name, "required": field.required, "type": "string",
            **schema}
