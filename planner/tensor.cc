#include "planner/tensor.h"
