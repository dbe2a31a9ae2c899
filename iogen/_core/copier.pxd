# Interface of iogen._core.copier: file-to-file copy through a caller-owned buffer (staging, drain).
# Python-level only (copy_range); the write loop it uses is iogen/_core/sysio.pxd's write_all.
