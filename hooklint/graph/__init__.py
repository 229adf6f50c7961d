"""The model-graph layer: which autograd op each module's hooks really bind to.

The parent process (``hooklint check``, ``hooklint graph``) never imports torch
nor the user's code: it decides statically which files can benefit
(:mod:`hooklint.graph.plan`), looks facts up in the cache
(:mod:`hooklint.graph.cache`) and asks a worker subprocess
(:mod:`hooklint.graph.worker`) for the rest.  Only the worker imports torch;
it executes the definitions of a model file (never its top-level statements),
builds instances, traces them with torch.fx (or, where fx fails, runs a
forward and walks the autograd graph) and returns
:class:`~hooklint.graph.facts.FileFacts`, plain data that rules read as
``ctx.graph``.
"""
