// Stand-ins for the CUDA math libraries whose headers this machine lacks (cuBLAS, cuBLASLt,
// cuSPARSE, cuSOLVER, cuRAND host API). Tier 1 compiles device code only and links nothing,
// so functions are declared, with C variadic parameters: any call type-checks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>
#include <library_types.h>

extern "C" {
typedef struct cublasContext* cublasHandle_t;
typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;
typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  int state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_INTERNAL_ERROR = 14, CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUBLAS_FILL_MODE_LOWER = 0, CUBLAS_FILL_MODE_UPPER = 1 } cublasFillMode_t;
typedef enum { CUBLAS_SIDE_LEFT = 0, CUBLAS_SIDE_RIGHT = 1 } cublasSideMode_t;
typedef enum { CUBLAS_DIAG_NON_UNIT = 0, CUBLAS_DIAG_UNIT = 1 } cublasDiagType_t;
typedef enum { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 } cublasPointerMode_t;
typedef enum {
  CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3
} cublasMath_t;
typedef enum {
  CUBLAS_COMPUTE_16F = 64, CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75, CUBLAS_COMPUTE_32F_FAST_TF32 = 77, CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_32I = 72
} cublasComputeType_t;
typedef enum {
  CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DFALT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99,
  CUBLAS_GEMM_DFALT_TENSOR_OP = 99
} cublasGemmAlgo_t;
typedef enum {
  CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8
} cublasLtMatmulDescAttributes_t;
typedef enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1 } cublasLtMatmulPreferenceAttributes_t;
typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_RELU = 2, CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_RELU_BIAS = 6, CUBLASLT_EPILOGUE_GELU = 32, CUBLASLT_EPILOGUE_GELU_BIAS = 36
} cublasLtEpilogue_t;
typedef enum { CUBLASLT_ORDER_COL = 0, CUBLASLT_ORDER_ROW = 1 } cublasLtOrder_t;

#define CUSET_DECLARE(ret, name) ret name(...);
#define CUSET_CUBLAS(X)                                                                                   \
  X(cublasCreate) X(cublasCreate_v2) X(cublasDestroy) X(cublasDestroy_v2) X(cublasSetStream)            \
  X(cublasSetStream_v2) X(cublasGetStream) X(cublasGetStream_v2) X(cublasSetMathMode)                    \
  X(cublasGetMathMode) X(cublasSetPointerMode) X(cublasSetPointerMode_v2) X(cublasSetWorkspace)          \
  X(cublasSetWorkspace_v2) X(cublasSgemm) X(cublasSgemm_v2) X(cublasDgemm) X(cublasDgemm_v2)             \
  X(cublasHgemm) X(cublasGemmEx) X(cublasSgemmEx) X(cublasSgemmStridedBatched)                           \
  X(cublasDgemmStridedBatched) X(cublasHgemmStridedBatched) X(cublasGemmStridedBatchedEx)               \
  X(cublasSgemmBatched) X(cublasDgemmBatched) X(cublasGemmBatchedEx) X(cublasSgemv) X(cublasSgemv_v2)   \
  X(cublasDgemv) X(cublasSaxpy) X(cublasSaxpy_v2) X(cublasSdot) X(cublasSdot_v2) X(cublasSscal)          \
  X(cublasSscal_v2) X(cublasSgeam) X(cublasDgeam) X(cublasSnrm2) X(cublasScopy) X(cublasSger)            \
  X(cublasStrsm) X(cublasSsyrk) X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul)                    \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)            \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)      \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                                   \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic)
#define CUSET_CUBLAS_DECLARE(name) CUSET_DECLARE(cublasStatus_t, name)
CUSET_CUBLAS(CUSET_CUBLAS_DECLARE)
const char* cublasGetStatusString(cublasStatus_t status);
const char* cublasGetStatusName(cublasStatus_t status);

typedef struct cusparseContext* cusparseHandle_t;
typedef enum { CUSPARSE_STATUS_SUCCESS = 0, CUSPARSE_STATUS_INVALID_VALUE = 3 } cusparseStatus_t;
const char* cusparseGetErrorString(cusparseStatus_t status);
CUSET_DECLARE(cusparseStatus_t, cusparseCreate)
CUSET_DECLARE(cusparseStatus_t, cusparseDestroy)
CUSET_DECLARE(cusparseStatus_t, cusparseSetStream)

typedef struct cusolverDnContext* cusolverDnHandle_t;
typedef enum {
  CUSOLVER_STATUS_SUCCESS = 0, CUSOLVER_STATUS_NOT_INITIALIZED = 1, CUSOLVER_STATUS_INVALID_VALUE = 3
} cusolverStatus_t;
CUSET_DECLARE(cusolverStatus_t, cusolverDnCreate)
CUSET_DECLARE(cusolverStatus_t, cusolverDnDestroy)
CUSET_DECLARE(cusolverStatus_t, cusolverDnSetStream)

typedef struct curandGenerator_st* curandGenerator_t;
typedef enum { CURAND_STATUS_SUCCESS = 0 } curandStatus_t;
typedef enum {
  CURAND_RNG_PSEUDO_DEFAULT = 100, CURAND_RNG_PSEUDO_XORWOW = 101, CURAND_RNG_PSEUDO_PHILOX4_32_10 = 161
} curandRngType_t;
CUSET_DECLARE(curandStatus_t, curandCreateGenerator)
CUSET_DECLARE(curandStatus_t, curandDestroyGenerator)
CUSET_DECLARE(curandStatus_t, curandSetPseudoRandomGeneratorSeed)
CUSET_DECLARE(curandStatus_t, curandSetStream)
CUSET_DECLARE(curandStatus_t, curandGenerateUniform)
CUSET_DECLARE(curandStatus_t, curandGenerateNormal)
#undef CUSET_CUBLAS_DECLARE
#undef CUSET_CUBLAS
#undef CUSET_DECLARE
}
