#!/bin/bash
set -eu
python3 check_greet.py
