"""A tool module whose import fails with something other than ImportError (as a typo in a
module-level statement would): the tools.json naming it must be refused as invalid docs."""

raise RuntimeError("this module cannot be imported")
