"""Reading HTTP bodies without I/O: a stream's server-sent events, and a body's Content-Encoding undone within a bound.

Pure functions and small state machines fed with bytes (as h11 is): the edge, the wire formats and the
refusal wordings all read bodies through these, and none of them does I/O.
"""
