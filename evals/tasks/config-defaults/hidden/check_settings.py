import json
import pathlib

from settings import DEFAULTS, load_config

cases = [
    ({}, dict(DEFAULTS)),
    ({"port": 1}, {**DEFAULTS, "port": 1}),
    ({"debug": True, "extra": "x"}, {**DEFAULTS, "debug": True, "extra": "x"}),
    ({"host": "h", "port": 2, "debug": True}, {"host": "h", "port": 2, "debug": True}),
]
for number, (data, expected) in enumerate(cases):
    path = pathlib.Path(f"case{number}.json")
    path.write_text(json.dumps(data))
    assert load_config(path) == expected, (data, load_config(path))
assert DEFAULTS == {"host": "127.0.0.1", "port": 8080, "debug": False}, "DEFAULTS changed"
print("settings: ok")
