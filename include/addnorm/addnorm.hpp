// The whole public API of addnorm's library in one include.
#pragma once

#include "addnorm/core/error.hpp"
#include "addnorm/core/parallel.hpp"
#include "addnorm/core/version.hpp"
#include "addnorm/core/view.hpp"
#include "addnorm/io/atomic_file.hpp"
#include "addnorm/io/csv.hpp"
#include "addnorm/io/npy.hpp"
#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/double_backward.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/reference.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "addnorm/norm/types.hpp"
