import json

DEFAULTS = {"host": "127.0.0.1", "port": 8080, "debug": False}


def load_config(path):
    with open(path) as f:
        data = json.load(f)
    return {"host": data["host"], "port": data["port"], "debug": data["debug"]}
