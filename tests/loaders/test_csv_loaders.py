"""CSV through the loaders: the native loader and the framework loaders' reader pread each row's
text (same bytes counted), and every row read is the sample's values as a csv reader parses them."""
import numpy as np

from iogen.world.communicator import SingleWorld
from iogen.formats.base import sample_bytes
from iogen.formats.csvfile import CsvFormat
from iogen.loaders import get_loader
from iogen.loaders.sampling import SampleReader


def test_native_and_framework_reads_give_each_rows_text(datasets, lt):
    wl = datasets.workload("csv", "native", dataset__record_length_bytes=300)
    layout, fmt = lt.parts(wl)
    plan = lt.plans(wl, layout)[0]
    row_bytes = fmt.row_bytes(layout.samples_per_file, 300)
    reader = SampleReader(layout, fmt)
    with get_loader(wl, layout, fmt, SingleWorld()) as loader:
        for step, batch in enumerate(loader.epoch(plan)):
            gids = plan.batches[step]
            assert batch.bytes == gids.size * row_bytes
            got = reader.read(gids)
            assert got.nbytes == batch.bytes
            for gid, s, n in zip(gids.tolist(), got.starts.tolist(), got.lengths.tolist()):
                f, i = divmod(gid, layout.samples_per_file)
                text = bytes(got.buf[s:s + n])
                values = CsvFormat.parse_row(text, 300, "t", i)
                assert np.array_equal(values, sample_bytes(layout.seed, layout.stream_of(f), i, 300))
                assert int(text.split(b",", 1)[0]) == i
