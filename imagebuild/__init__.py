"""Tools that make the images reproducible: the per-image package locks (``lock``), the base
images pinned by digest (``pin_bases``) and the SBOM written into each image (``sbom``)."""
