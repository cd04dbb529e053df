"""GET /spec's document, written from the route declarations (`vtx.serve.spec`)."""

import pytest

from vtx.serve.spec import Field, Route, swagger


def test_a_form_s_list_is_its_json_text_and_a_json_body_keeps_its_schema():
    form = Route("POST", "/f", "F", "ok", (
        Field("q", "a string", "text", required=True),
        Field("pairs", "a list of [source, target] pairs", "pairs", default=None)))
    body = Route("POST", "/j", "J", "ok", (
        Field("text", "a list of strings", "lines", required=True, where="json"),
        Field("beam", "an integer", "beam", where="json", default=4)))
    paths = swagger((form, body), "1")["paths"]
    assert [(p["name"], p["type"], p["required"]) for p in paths["/f"]["post"]["parameters"]] \
        == [("q", "string", True), ("pairs", "string", False)]
    [parameter] = paths["/j"]["post"]["parameters"]
    assert parameter["schema"]["required"] == ["text"]
    assert parameter["schema"]["properties"]["text"]["items"] == {"type": "string"}
    assert parameter["schema"]["properties"]["beam"]["default"] == 4


def test_a_field_of_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="kind 'a tree'"):
        Field("tree", "a tree", "a tree")
