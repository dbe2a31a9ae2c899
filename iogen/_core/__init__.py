"""The compiled core: the I/O, fill and CRC mechanism in Cython, with a pure-Python twin in pure/.

The list of its modules is kept here, once: setup.py builds them, iogen/core_switch.py (the switch
between the two implementations) imports them, and the core tests load both implementations of
each. PROBES are test and benchmark hooks (a bounds-check probe, a plain pread loop, the scalar
fill switch): built and tested like the rest, never imported by iogen's stages.
"""
MODULES = ("clock", "reader", "fill", "crc", "tfrecord", "copier", "permute", "ckpt", "publish", "barrier")
PROBES = ("probes",)
