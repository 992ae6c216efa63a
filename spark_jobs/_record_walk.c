/* The one sequential step of decoding Kafka records: walking record lengths.
 *
 * Inside a v2 record batch, each record is a zigzag varint length followed by that
 * many bytes, so where record k+1 starts depends on record k. Everything else about
 * the records is decoded with numpy, all records at once (spark_jobs.arrow_records);
 * this loop is the part numpy cannot do. Python does the same walk at ~130 ns per
 * record; this does it at a few ns. Built as an optional extension: without a C
 * compiler the Python loop is used instead.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* record_heads(data, region_starts, counts, out) -> None
 *
 * data: the batches' record regions (bytes-like); region_starts, counts: int64 per
 * batch; out: writable int64, one slot per record. Writes where each record's length
 * varint starts. Raises ValueError("record N ...") on a length that is negative, longer
 * than 5 bytes, or runs past `data`; the caller reports it as a corrupt batch.
 */
static PyObject *record_heads(PyObject *self, PyObject *args) {
    Py_buffer data, starts, counts, out;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &data, &starts, &counts, &out))
        return NULL;
    const uint8_t *d = (const uint8_t *)data.buf;
    const int64_t len = (int64_t)data.len;
    const int64_t *st = (const int64_t *)starts.buf;
    const int64_t *ct = (const int64_t *)counts.buf;
    int64_t *o = (int64_t *)out.buf;
    const Py_ssize_t batches = starts.len / 8, slots = out.len / 8;
    Py_ssize_t k = 0;
    int bad = 0; /* 1: bad length, 2: more records than slots, 3: shapes differ */
    if (counts.len != starts.len)
        bad = 3;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b < batches && !bad; b++) {
        int64_t pos = st[b];
        for (int64_t i = 0; i < ct[b]; i++) {
            if (k >= slots) { bad = 2; break; }
            o[k] = pos;
            uint64_t raw = 0;
            int shift = 0, n = 0;
            for (;;) {
                if (pos + n >= len || n == 5) { bad = 1; break; }
                uint8_t byte = d[pos + n++];
                raw |= (uint64_t)(byte & 0x7F) << shift;
                if (!(byte & 0x80)) break;
                shift += 7;
            }
            if (bad) break;
            int64_t length = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            if (length < 0 || pos + n + length > len) { bad = 1; break; }
            pos += n + length;
            k++;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&counts);
    PyBuffer_Release(&out);
    if (bad == 1)
        return PyErr_Format(PyExc_ValueError, "record %zd: its length runs past the batch", k);
    if (bad == 2)
        return PyErr_Format(PyExc_ValueError, "more records than the %zd slots given", slots);
    if (bad == 3)
        return PyErr_Format(PyExc_ValueError, "region_starts and counts differ in length");
    if (k != slots)
        return PyErr_Format(PyExc_ValueError, "%zd records for %zd slots", k, slots);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"record_heads", record_heads, METH_VARARGS,
     "record_heads(data, region_starts, counts, out): where each record starts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_record_walk",
    "Walks Kafka record lengths (the sequential step of record decoding).", -1, methods,
};

PyMODINIT_FUNC PyInit__record_walk(void) { return PyModule_Create(&module); }
