"""Delivery channels: subscriptions grouped into at most K channels with few false positives.

Modules
-------
groups
    The multicast group counts of Opyrchal et al. (:func:`group_counts`, :func:`cgm_max_endpoints`).

Examples
--------
>>> from routing import channels
>>> channels.group_counts(4, 2)["groups"]["cgm"]
8
"""

from routing.channels.groups import cgm_max_endpoints, group_counts

__all__ = ["cgm_max_endpoints", "group_counts"]
