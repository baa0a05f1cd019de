#!/usr/bin/env python3
"""Stands in for a tool that never answers: ignores its arguments and sleeps 60 s."""

import time

time.sleep(60)
