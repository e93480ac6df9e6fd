"""Rankers: what orders the retrieved candidates (fusion, language balance, rule boosts) and joins the attempts."""
