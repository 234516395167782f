#include "planner/topology.h"

#include "gtest/gtest.h"
