"""The suggestions file of POST /suggest: whole JSON lines, appended, bounded."""

import json
import threading

import pytest

from vtx.serve.requests import RequestError
from vtx.serve.suggestions import Suggestions


def test_concurrent_suggestions_are_whole_lines_and_the_file_stops_at_its_bound(tmp_path):
    path = tmp_path / "suggestions.jsonl"
    path.write_text('{"q": "kept"}\n')
    suggestions = Suggestions(path, max_bytes=4 << 20)
    record = {"q": "A man. " * 500, "s": "Ein Mann. " * 500, "source": "en", "target": "de"}
    threads = [threading.Thread(target=lambda: [suggestions.add(record) for _ in range(20)])
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines[0] == {"q": "kept"} and len(lines) == 161
    assert all({k: v for k, v in line.items() if k != "time"} == record for line in lines[1:])
    full = Suggestions(path, max_bytes=path.stat().st_size + 10)
    with pytest.raises(RequestError, match="the suggestions file is full") as refused:
        full.add(record)
    assert refused.value.status == 507 and len(path.read_text().splitlines()) == 161
