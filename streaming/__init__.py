"""Spark Structured Streaming jobs, the command line and their thin adapters over ``routing``."""
