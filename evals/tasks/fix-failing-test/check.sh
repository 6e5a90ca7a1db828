#!/bin/bash
# The visible test (as shipped, whatever the agent did to its copy) and the hidden one.
set -eu
python3 test_calc.py
python3 test_calc_hidden.py
