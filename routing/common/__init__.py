"""Helpers shared by every layer of ``routing``: reading JSON instance documents, array helpers.

The offline commands read one JSON document each (a distribution instance,
docs/reference/distribution.md; a placement instance, docs/reference/placement.md). They check it
the same way and report the first bad item by its path, what
was wrong and what would be valid, each raising its own error class.

Modules
-------
json_fields
    :func:`items` (a list of objects under a key), :func:`text` (a non-empty string),
    :func:`number` (a finite number with a lower bound) and :func:`kind` (a value's type name for
    a message).
arrays
    :func:`routing.common.arrays.distinct_sorted` (``np.unique`` of an array by one sort).

Examples
--------
>>> from routing import common
>>> common.text({"id": ""}, "id", "nodes[2]", ValueError)
Traceback (most recent call last):
...
ValueError: nodes[2]: 'id' must be a non-empty string (got '')
"""

from routing.common.json_fields import items, kind, number, text

__all__ = ["items", "kind", "number", "text"]
