"""One spec per host function (reference.spec.Spec), each in a module of its own.

reference.registry finds every module here: a new one needs no other file changed.
"""
