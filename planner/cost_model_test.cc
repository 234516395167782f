#include "planner/cost_model.h"

#include "gtest/gtest.h"
