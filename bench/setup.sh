# Device-side setup for the pyopencl labs and helpers (source it from the repo root on the GPU machine, after
# prepare.sh filled .gl/ and .whl/; prepare.sh copies it to .h200/setup.sh): the OpenCL ICD loader from .gl/, the
# NVIDIA ICD file, the carried wheels in /tmp/site, PYTHONPATH. On a machine without NVIDIA's OpenCL library it
# changes nothing system-wide (it used to write an empty nvidia.icd there).
L=$(find / -name 'libnvidia-opencl.so*' -not -path '/proc/*' 2>/dev/null | head -1)
if [ -z "$L" ]; then
    echo "setup.sh: no libnvidia-opencl.so on this machine; not installing the ICD loader or writing nvidia.icd" >&2
else
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    mkdir -p /etc/OpenCL/vendors
    echo "$L" > /etc/OpenCL/vendors/nvidia.icd
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/python:$PWD/converter PYTHONUNBUFFERED=1
