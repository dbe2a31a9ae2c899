"""Placeholder: tfrecord is being written."""
