#!/bin/bash
# hidden/tool.py is the original: the options are the shipped ones, whatever the agent did.
set -eu
python3 check_docs.py
