#!/bin/bash
set -eu
python3 check_pages.py
