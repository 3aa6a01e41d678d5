# The backend library proper (IR, compiler, engine) on top of the kernels.
add_library(ipu_backend STATIC
  ${CMAKE_CURRENT_LIST_DIR}/ir/graph.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ir/op_defs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ir/builder.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ir/text.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compiler/autodiff.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compiler/op_shapes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compiler/compiler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compiler/first_fit.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compiler/mixed_precision.cpp
  ${CMAKE_CURRENT_LIST_DIR}/engine/engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizers/lowering.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizers/adam_moments.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizers/sgd.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizers/lars.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizers/lamb.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizers/rmsprop.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizers/adam.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizers/ema.cpp
  ${CMAKE_CURRENT_LIST_DIR}/engine/host_fusion.cpp
  ${CMAKE_CURRENT_LIST_DIR}/replication/replicate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/replication/ring_collective.cpp
  ${CMAKE_CURRENT_LIST_DIR}/replication/replica_group.cpp)
target_link_libraries(ipu_backend PUBLIC ipu_kernels ipu_precision fmt::fmt nlohmann_json::nlohmann_json
                                         OpenMP::OpenMP_CXX)
