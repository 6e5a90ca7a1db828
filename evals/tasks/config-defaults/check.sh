#!/bin/bash
set -eu
python3 check_settings.py
