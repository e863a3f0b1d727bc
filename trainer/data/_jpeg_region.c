/* One region of a JPEG decoded alone, by libjpeg-turbo's jpeg_crop_scanline and
 * jpeg_skip_scanlines: the iMCU rows above the region are entropy-decoded only (no IDCT, no
 * upsampling, no colour conversion), those below it likewise where `to_end` asks for the
 * file to be checked to its end (else not at all), and only the iMCU columns the region
 * touches are transformed. A random-resized training crop touches about half a
 * photograph's iMCUs (docs/benchmarks.md, "Decode profile").
 *
 * decode(data, reduction, left, top, right, bottom, fast_idct, to_end)
 *     -> (pixels: bytearray, x, width)
 *
 * decodes the rows [top, bottom) of the JPEG in `data` at 1/`reduction` (1, 2, 4 or 8) of its
 * size each way, as RGB, from column `x` for `width` columns: a block that covers the pixel
 * box [left, right) x [top, bottom) of the scaled image, (bottom - top) rows of width * 3
 * bytes, its columns reaching past the box's edges where the image has more (decode()), so
 * that the chroma upsampling of the box's edge pixels sees what a full decode gives it: every
 * pixel of the box is the full decode's at the same scale and IDCT (libjpeg-turbo's fast one
 * if `fast_idct`; tests/trainer/data/test_jpeg_decode.py). libjpeg-turbo writes the rows
 * straight into the block; the caller's copy of the box out of it is also its mirror (a
 * copy into exact box rows here cost more than torch's copy of the box: 0.08 ms an image).
 *
 * Strict: whatever libjpeg-turbo warns of (corrupt data, a premature end) raises ValueError
 * with its message, as a cut file would otherwise decode to grey rows. Errors in the
 * arguments raise ValueError too. trainer/data/jpeg_decode.py is the Python side.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>

#include <jpeglib.h>

struct failure {
    struct jpeg_error_mgr manager;
    jmp_buf escape;
    char message[JMSG_LENGTH_MAX];
};

static void on_error(j_common_ptr cinfo) {
    struct failure *failure = (struct failure *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, failure->message);
    longjmp(failure->escape, 1);
}

/* Level -1 is a warning (libjpeg then goes on with made-up data): an error here. Trace
 * messages (levels 0 and up) are dropped, as libjpeg's default does. */
static void on_message(j_common_ptr cinfo, int level) {
    if (level < 0)
        on_error(cinfo);
}

/* The columns decoded to the right of the box, in chroma samples (max_h_samp_factor pixels
 * each): one is what the box's last pixels need (none gives other pixels in 11 % of the boxes
 * of tests/trainer/data/test_jpeg_decode.py's encodings, one and two give none); two, for a
 * sampling the tests do not cover, at the cost of a few pixels' decode. */
#define RIGHT_MARGIN 2

/* The most memory libjpeg may take for one image: trainer/data/jpeg_limits.py's
 * DECODE_BUDGET, which refuses what its markers declare past it before any decode; this is
 * for what they do not show. Past it libjpeg-turbo, which has no backing store, stops with an
 * error: a damaged image. */
#define DECODE_BUDGET (512L * 1024 * 1024)

static int clamp(int value, int low, int high) {
    return value < low ? low : (value > high ? high : value);
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer data;
    int reduction, left, top, right, bottom, fast_idct, to_end;
    struct jpeg_decompress_struct cinfo;
    struct failure failure;
    PyObject *volatile pixels = NULL;
    /* Python's thread state while the GIL is released for libjpeg-turbo's work (NULL while
     * this holds the GIL): other threads run during a decode, as with simplejpeg's. */
    PyThreadState *volatile released = NULL;
    volatile int created = 0;  /* jpeg_create_decompress has returned */
    JDIMENSION x, width, first_row, row;
    int last;
    size_t stride;
    char *rows;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*iiiiipp", &data, &reduction, &left, &top, &right, &bottom,
                          &fast_idct, &to_end))
        return NULL;
    if (reduction != 1 && reduction != 2 && reduction != 4 && reduction != 8) {
        PyBuffer_Release(&data);
        return PyErr_Format(PyExc_ValueError, "reduction must be 1, 2, 4 or 8, not %d",
                            reduction);
    }
    cinfo.err = jpeg_std_error(&failure.manager);
    failure.manager.error_exit = on_error;
    failure.manager.emit_message = on_message;
    /* The escape is set before jpeg_create_decompress, whose own errors (a library and
     * headers of different versions) longjmp to it too: then there is nothing to destroy. */
    if (setjmp(failure.escape)) {
        if (released != NULL)
            PyEval_RestoreThread(released);
        if (created)
            jpeg_destroy_decompress(&cinfo);
        Py_XDECREF(pixels);
        PyBuffer_Release(&data);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, failure.message);
        return NULL;
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    cinfo.mem->max_memory_to_use = DECODE_BUDGET;
    /* `data` stays valid without the GIL: this holds its buffer until the end. */
    released = PyEval_SaveThread();
    jpeg_mem_src(&cinfo, (const unsigned char *)data.buf, (unsigned long)data.len);
    jpeg_read_header(&cinfo, TRUE);
    cinfo.out_color_space = JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned int)reduction;
    cinfo.dct_method = fast_idct ? JDCT_IFAST : JDCT_ISLOW;
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_components != 3 || left < 0 || top < 0 || right <= left
            || bottom <= top || (JDIMENSION)right > cinfo.output_width
            || (JDIMENSION)bottom > cinfo.output_height) {
        snprintf(failure.message, sizeof failure.message,
                 "the box (%d, %d, %d, %d) is not inside the %ux%u image decoded to RGB",
                 left, top, right, bottom, cinfo.output_width, cinfo.output_height);
        longjmp(failure.escape, 1);
    }
    /* The columns decoded: a margin each way, so that the chroma upsampling of the box's
     * edge pixels finds the samples beyond them as in a full decode. To the left one pixel
     * (libjpeg-turbo widens the left edge down to an iMCU boundary by itself); to the right
     * RIGHT_MARGIN chroma samples, since the cropped width sets where the upsampler takes the
     * last chroma sample as the image's edge. And never fewer than max_h_samp_factor + 1
     * columns from the left (`last`): a crop one chroma sample wide takes libjpeg-turbo's
     * plain upsampler, not the smooth one (the last column of a 4:2:0 image 16n + 2 px wide,
     * up to 47 levels off). Rows need none: libjpeg-turbo's skip keeps the upsampler's
     * context rows, so the first row read is the full decode's. */
    last = (int)cinfo.output_width - cinfo.max_h_samp_factor - 1;
    x = (JDIMENSION)clamp(left - 1 < last ? left - 1 : last, 0, (int)cinfo.output_width);
    width = (JDIMENSION)clamp(right + RIGHT_MARGIN * cinfo.max_h_samp_factor, 0,
                              (int)cinfo.output_width) - x;
    first_row = (JDIMENSION)top;
    jpeg_crop_scanline(&cinfo, &x, &width);
    if (first_row > 0 && jpeg_skip_scanlines(&cinfo, first_row) != first_row) {
        snprintf(failure.message, sizeof failure.message, "cannot skip to row %u", first_row);
        longjmp(failure.escape, 1);
    }
    stride = (size_t)cinfo.output_width * 3;
    row = (JDIMENSION)bottom;
    PyEval_RestoreThread(released);
    released = NULL;
    pixels = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(stride * (row - first_row)));
    if (pixels == NULL)
        longjmp(failure.escape, 1);
    /* No other thread sees `pixels` before it is returned. */
    rows = PyByteArray_AS_STRING(pixels);
    released = PyEval_SaveThread();
    while (cinfo.output_scanline < row) {
        JSAMPROW at = (JSAMPROW)(rows + stride * (cinfo.output_scanline - first_row));
        jpeg_read_scanlines(&cinfo, &at, 1);
    }
    /* With `to_end` the rows below the box are entropy-decoded too (skipped: no IDCT, no
     * upsampling, no colour conversion) and the decode finished at the End Of Image marker,
     * where libjpeg warns of damage that desynchronised the entropy code without an error
     * before it (a zeroed run, a frame whose sampling its scan does not match: "extraneous
     * bytes before marker"): such damage above the box's last row gives wrong pixels in
     * the box with no other sign. Without it those rows are never decoded. */
    width = cinfo.output_width;
    if (to_end) {
        /* Not a skip to the end: libjpeg-turbo's marks the input finished without reading
         * it. A skip to the last row, then that row read (into the image's pool). */
        if (cinfo.output_scanline < cinfo.output_height) {
            JSAMPARRAY last_row = (*cinfo.mem->alloc_sarray)(
                (j_common_ptr)&cinfo, JPOOL_IMAGE, cinfo.output_width * 3, 1);
            if (cinfo.output_scanline + 1 < cinfo.output_height)
                jpeg_skip_scanlines(&cinfo, cinfo.output_height - 1 - cinfo.output_scanline);
            jpeg_read_scanlines(&cinfo, last_row, 1);
        }
        jpeg_finish_decompress(&cinfo);
    } else {
        jpeg_abort_decompress(&cinfo);
    }
    jpeg_destroy_decompress(&cinfo);
    PyEval_RestoreThread(released);
    PyBuffer_Release(&data);
    return Py_BuildValue("(NII)", pixels, x, width);
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(data, reduction, left, top, right, bottom, fast_idct, to_end) -> (pixels, x, "
     "width): the box's rows of the JPEG at 1/reduction, as RGB, from column x; to_end: "
     "checked to its End Of Image marker."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpeg_region",
    "A JPEG's region decoded alone by libjpeg-turbo (trainer/data/jpeg_decode.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__jpeg_region(void) {
    PyObject *created = PyModule_Create(&module);
    if (created != NULL)
        PyModule_AddIntConstant(created, "LIBJPEG_TURBO_VERSION", LIBJPEG_TURBO_VERSION_NUMBER);
    return created;
}
