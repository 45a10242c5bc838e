"""Thin JSON blueprints: parse, call one service, answer."""
