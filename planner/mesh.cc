#include "planner/mesh.h"
