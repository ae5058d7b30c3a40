# Installs the already-built addnorm into WORK_DIR/prefix, then configures, builds and runs the
# consumer project in tests/install/consumer against it. Fails on any step.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/addnorm/norm/layer_norm.hpp include/addnorm/core/version.hpp bin/addnorm
          lib/cmake/addnorm/addnormConfig.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install did not produce ${f}")
  endif()
endforeach()
run_step("configure consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run_step("build consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_step("run consumer" ${WORK_DIR}/build/consumer)
if(NOT step_output MATCHES "x_hat: -1.3416 -0.4472 0.4472 1.3416")
  message(FATAL_ERROR "consumer printed unexpected output:\n${step_output}")
endif()
message(STATUS "consumer ok: ${step_output}")
run_step("run installed addnorm" ${prefix}/bin/addnorm --version)
# The installed Python package (when the build has one), imported from the prefix alone. (Lines of
# the script end in \n: a semicolon would split the CMake argument.)
if(PYTHON_DIR)
  run_step("import installed addnorm in Python" ${CMAKE_COMMAND} -E env PYTHONPATH=${prefix}/${PYTHON_DIR} ${PYTHON} -c
           "import numpy, addnorm\ny = addnorm.layer_norm_forward(numpy.array([2, 4, 6, 8], 'float32'))[0]\nprint('python x_hat:', ' '.join('%.4f' % v for v in y), addnorm.__file__)")
  if(NOT step_output MATCHES "python x_hat: -1.3416 -0.4472 0.4472 1.3416 ${prefix}/${PYTHON_DIR}/addnorm/__init__.py")
    message(FATAL_ERROR "the installed Python package printed unexpected output:\n${step_output}")
  endif()
  message(STATUS "python ok: ${step_output}")
  # addnorm.torch on its C++ backend (addnorm._torch_ops), when the build has it: a LayerNorm step.
  if(TORCH_OPS)
    run_step("import installed addnorm.torch (C++ backend)" ${CMAKE_COMMAND} -E env PYTHONPATH=${prefix}/${PYTHON_DIR}
             ADDNORM_TORCH_BACKEND=cpp ${PYTHON} -c
             "import torch, addnorm.torch as at\nx = torch.tensor([2., 4., 6., 8.], requires_grad=True)\ny = at.layer_norm(x)\n\
(y * torch.arange(4.)).sum().backward()\nprint('torch', at.backend, ' '.join('%.4f' % v for v in y.tolist()), \
'grad finite', bool(torch.isfinite(x.grad).all()))")
    if(NOT step_output MATCHES "torch cpp -1.3416 -0.4472 0.4472 1.3416 grad finite True")
      message(FATAL_ERROR "the installed addnorm.torch printed unexpected output:\n${step_output}")
    endif()
    message(STATUS "torch ok: ${step_output}")
  endif()
endif()
