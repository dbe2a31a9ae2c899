# Interface of iogen._core.tfrecord: TFRecord framing (Python-level only; CRC-32C is iogen/_core/crc.pxd).
